/*===- tools/htp-run/executor.h - What run, check and report share --------===*
 *
 * Private to the executor half of htp-run. run.c loads a block, binds its
 * data, runs it on the ranks and owns an htp_run_state; prepare.c settles
 * what a run and a training both need before their ranks start; check.c
 * compares the results with the unsplit block (--check); report.c prints
 * the table or the JSON report from them.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_EXECUTOR_H
#define HTP_RUN_EXECUTOR_H

#include "runtime/htp_entry.h"
#include "tools/htp-run/entry.h"
#include "tools/htp-run/options.h"
#include "tools/htp-run/ranks.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* --check: max |y_tp - y_1| / max |y_1| above this fails the run. A bf16
 * block's split rounds to bf16 what the tp-1 build never rounds (each rank's
 * partial sums before the all-reduce, the bias after it: 2^-9 relative
 * each, carried through the layers that follow), so its bound is wider:
 * htp_check_tolerance picks one. */
#define HTP_CHECK_TOLERANCE 1e-4
#define HTP_CHECK_TOLERANCE_BF16 2e-2
/* With --matmul-precision tf32 or bf16 an operand whose f32 value the split
 * and the unsplit block compute a few ulps apart (sums in another order)
 * can round a format ulp apart, so an f32 block's bound widens to half
 * that ulp relative: 2^-(mantissa bits + 1), 4.9e-4 (TF32) and 3.9e-3
 * (bf16). */

/* Everything a run owns, released in one place (run.c). */
typedef struct htp_run_state {
  const htp_compiler *loader;
  htp_compiled compiled;
  htp_signature sig;
  int shared;                        /* the block is a .so from htp-compile */
  htp_device device;                 /* --device */
  int matmul_precision;              /* --matmul-precision (an htp_matmul_precision) */
  const htp_compiler *eval_loader;   /* --train: the eval entry (none: NULL) */
  htp_compiled eval_compiled;
  htp_signature eval_sig;
  const htp_compiler *check_loader;  /* --check: the tp-1 build of the block */
  htp_compiled check_compiled;
  htp_signature check_sig;
  int tp;
  int process_rank;                  /* mpi, nccl: this process's rank; local: -1 */
  uint64_t held_bytes;               /* the buffers above, as htp_run_check_memory counted them */
  void **global;                     /* [num_args] arguments at their global shapes */
  /* [tp][num_results]: host copies of each rank's results of the last
   * iteration (the ranks' own buffers live in their contexts' memory and
   * are gone after the run); NULL for other processes' ranks. */
  void ***results;
  /* [num_results]: each result at its global shape, as written by
   * --output and compared by --check: a gradient of a sharded parameter
   * gathered from every rank's shard (owned), any other result rank 0's
   * own (borrowed from results[0]). NULL until the run finished. */
  void **outputs;
  int32_t *sm_counts;                /* [tp] --sms, 0 for ranks not named; NULL without --sms */
  htp_ranks *ranks;
  htp_rank_outcome outcome;
  double *times;                     /* [iters] iteration ms */
  double *rank_compute_ms;           /* [tp] median compute ms */
  double *check_errors;              /* [num_results] or NULL */
  int balance;                       /* each rank has an htp_balancer */
  htp_balancer_config balancer;      /* its config, when balance */
  int blas_threads;                  /* BLAS threads per rank (process) */
  const char *blas_threads_from;     /* the user's variable that set them, or NULL */
  int bad_command_line;              /* the run failed on the command line's fault: exit 2 */
} htp_run_state;

/* The planner's view of the block (state->sig): with a balance record, the
 * runtime's balancer config from the signature and --policy, --select,
 * --seed, --impute (state->balance, state->balancer; job likewise); without,
 * one layer of one unit per kind, detection only, and --policy other than
 * none or --select other than random are errors (prepare.c, for run.c and
 * train.c). */
int htp_run_balance_config(const htp_run_options *options, htp_run_state *state,
                           htp_rank_job *job, char *err, size_t err_size);

/* Resolves the tp into state->tp: .mlir is compiled for the requested one;
 * a .so's signature decides, and a --tp that differs, a world of another
 * size (mpirun) or a --slow, --fault or --sms rank past it is an error
 * (prepare.c, for run.c and train.c). */
int htp_run_check_tp(const htp_run_options *options, int shared, long requested,
                     htp_run_state *state, char *err, size_t err_size);

/* Each rank's share of the cores for its kernels' threads (all ranks of
 * this host together use them once), unless the user set BLAS's thread
 * count: then it stays (state->blas_threads, state->blas_threads_from).
 * mpi: the ranks on this host are mpirun's local ranks, not state->tp. */
void htp_run_choose_blas_threads(htp_run_state *state, int mpi);

/* A 64-byte aligned buffer of at least bytes (one 64-byte line for 0). */
static inline void *htp_aligned_buffer(size_t bytes) {
  size_t size = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, size ? size : 64);
}

static inline void htp_free_buffers(void **buffers, int count) {
  if (!buffers)
    return;
  for (int i = 0; i < count; i++)
    free(buffers[i]);
  free(buffers);
}

/* prepare.c. The bytes of sig's buffers, each rounded to its 64-byte
 * alignment: one rank's arguments, results and workspace, and every argument
 * at its global shape. Returns 0 when a sum overflows. */
int htp_run_buffer_bytes(const htp_signature *sig, uint64_t *per_rank, uint64_t *global);
/* Limits before allocation: `held` bytes already allocated, plus sig's
 * buffers on local_ranks ranks (and its global arguments when globals), go
 * to *total; refused (non-zero, a message naming `what`) when that overflows
 * or exceeds the machine's physical memory, so a block claiming an absurd
 * tp, shape or workspace is refused before anything is allocated rather
 * than running the machine out of memory. */
int htp_run_check_memory(const char *what, uint64_t held, const htp_signature *sig,
                         int local_ranks, int globals, uint64_t *total, char *err,
                         size_t err_size);
/* Host memory beside the ranks' buffers: each local rank's copy of its
 * results and the argument slice it holds while uploading (the largest);
 * UINT64_MAX when that overflows. */
uint64_t htp_run_host_staging_bytes(const htp_signature *sig, int local_ranks);

/* check.c. --check: runs the tp-1 build of the block (jit) on the same
 * global data, on the CPU, and sets state->check_errors. A tp-1 .so (only
 * with --device cuda) is its own reference: the same .so on the CPU.
 * Returns 0, or non-zero with err. */
int htp_run_check(const htp_run_options *options, const htp_compiler *jit,
                  htp_run_state *state, char *err, size_t err_size);
/* Units (all ranks and layers) the plan of the last timed iteration pruned:
 * when there are some, the output is approximate by design. */
int64_t htp_pruned_units(const htp_run_state *state);
/* The --check tolerance of the run's block: HTP_CHECK_TOLERANCE_BF16 when a
 * result is bf16, else HTP_CHECK_TOLERANCE, widened for a reduced
 * --matmul-precision (above). */
double htp_check_tolerance(const htp_run_state *state);
/* Result `result` is above the tolerance with no units pruned. */
int htp_check_failed(const htp_run_state *state, int result);

/* report.c. Iteration times (the last rank's finish) and each rank's median
 * compute, from the outcome; non-zero when out of memory. */
int htp_summarise_ranks(const htp_run_options *options, htp_run_state *state);
/* The table or the JSON report on stdout; non-zero (with err) when the
 * report could not be built or written. */
int htp_report(const htp_run_options *options, const htp_run_state *state, char *err,
               size_t err_size);
/* --profile's table on stdout: each call of `what` (the block, a training
 * step) with its median per rank over `iterations`, from the outcome. */
void htp_report_profile(const htp_rank_outcome *outcome, int tp, long iterations,
                        const char *what);

#endif /* HTP_RUN_EXECUTOR_H */
