/*===- tools/htp-run/run.c - htp-run: load, bind, run ---------------------===*
 *
 * This file implements htp_run_main (tools/htp-run/entry.h): parse the
 * command line, get an entry point from the JIT or from a shared object,
 * read its signature (runtime/htp_entry.h), refuse what this machine cannot
 * hold before anything is allocated, bind data, run warm-up and timed
 * iterations on the ranks (ranks.c) on --device, write the outputs, then
 * --check (check.c) and the report (report.c). Parameters are held at their
 * global shapes on the host; each rank slices its part and uploads it into
 * its context's memory (ranks.c), and hands back its results. A bf16
 * block's buffers hold bf16 bit patterns; its results are widened to f32
 * when they are written.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/executor.h"

#include "kernels/htp_bf16.h"
#include "kernels/htp_kernel_table.h"
#include "tools/htp-run/data.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"
#include "tools/htp-run/host.h"
#include "tools/htp-run/npy.h"
#include "tools/htp-run/paths.h"
#include "tools/htp-run/slice.h"
#include "tools/htp-run/so_loader.h"
#include "tools/htp-run/train/train.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { EXIT_ERROR = 1, EXIT_USAGE = 2 };

/* Under mpi the errors every process meets alike (bad flags, files, ...)
 * are printed by rank 0 only; each prints its own rank's failure. */
static int errors_muted;

/* Prints prefix and message as one line in one write, so that processes
 * under mpirun do not interleave; control characters that came from a
 * corrupt file's names are shown as '?' rather than sent to the terminal. */
static void say(const char *prefix, const char *message) {
  char line[20000];
  size_t used = (size_t)snprintf(line, sizeof line, "%s", prefix);
  for (const unsigned char *p = (const unsigned char *)message; *p && used + 2 < sizeof line; p++)
    line[used++] = (char)((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f ? '?' : *p);
  line[used++] = '\n';
  line[used] = '\0';
  fputs(line, stderr);
  fflush(stderr);
}

static int fail(const char *message) {
  if (!errors_muted)
    say("htp-run: error: ", message);
  return EXIT_ERROR;
}

/* Under mpi, a process that failed after the world exists, before or
 * outside the run: its peers are told at once (else they wait for it until
 * their deadline, and its world's destroy waits for them), and its error,
 * muted on every process but rank 0 (errors all processes meet alike), is
 * said as a note when the world had not failed before: its own. */
static int fail_process(htp_run_state *state, const char *message) {
  if (htp_ranks_abort(state->ranks) && errors_muted) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "htp-run: note: process %d failed: ", state->process_rank);
    say(prefix, message);
  }
  return fail(message);
}

/* FILE must be a regular file (a directory, /dev/zero or a pipe is not a
 * block). An ELF file is a shared object from htp-compile; anything else
 * goes to the JIT. Returns 1 or 0, or -1 with err. */
static int is_shared_object(const char *path, char *err, size_t err_size) {
  /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return -htp_set_error(err, err_size, "cannot open '%s': %s", path, strerror(errno));
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return -htp_set_error(err, err_size, "'%s' is not a regular file (a directory, device or "
                          "pipe?): htp-run runs a .mlir file or a shared object from htp-compile",
                          path);
  }
  unsigned char magic[4] = {0};
  ssize_t got = read(fd, magic, sizeof magic);
  close(fd);
  const int elf = got == 4 && memcmp(magic, "\x7f" "ELF", 4) == 0;
  /* A file named .so that is not one would reach the MLIR parser and be
   * refused for its first byte: say what it is not instead. */
  const size_t length = strlen(path);
  if (!elf && length >= 3 && strcmp(path + length - 3, ".so") == 0)
    return -htp_set_error(err, err_size, "'%s' is not a shared object (no ELF header): "
                          "htp-compile makes one from a .mlir (htp-compile block.mlir -o "
                          "block.so)", path);
  return elf;
}

static void release(htp_run_state *state) {
  if (state->outputs)
    for (int r = 0; r < state->sig.num_results; r++)
      if (state->sig.results[r].shard_layout != HTP_SHARD_NONE)
        free(state->outputs[r]);
  free(state->outputs);
  if (state->results)
    for (int r = 0; r < state->tp; r++)
      htp_free_buffers(state->results[r], state->sig.num_results);
  free(state->results);
  free(state->sm_counts);
  if (state->global)
    for (int i = 0; i < state->sig.num_args; i++)
      free(state->global[i]);
  free(state->global);
  free(state->times);
  free(state->rank_compute_ms);
  free(state->check_errors);
  htp_rank_outcome_free(&state->outcome);
  htp_signature_free(&state->sig);
  htp_signature_free(&state->check_sig);
  htp_signature_free(&state->eval_sig);
  if (state->eval_loader && state->eval_compiled.handle)
    state->eval_loader->unload(&state->eval_compiled);
  if (state->loader && state->compiled.handle)
    state->loader->unload(&state->compiled);
  if (state->check_loader && state->check_compiled.handle)
    state->check_loader->unload(&state->check_compiled);
  /* Last: under mpi a failed world ends the process (MPI_Abort). */
  htp_ranks_close(state->ranks);
}

/* Fills state->global: random data, --input files, --weights, all at the
 * global shapes (so errors name the shapes the user's files have). The
 * binders see each argument as an unsharded tensor of its global shape. */
static int bind_global_data(const htp_run_options *options, htp_run_state *state, char *err,
                            size_t err_size) {
  const htp_signature *sig = &state->sig;
  htp_signature global_sig = *sig;
  global_sig.args = calloc((size_t)sig->num_args + 1, sizeof *global_sig.args);
  state->global = calloc((size_t)sig->num_args + 1, sizeof *state->global);
  if (!global_sig.args || !state->global) {
    free(global_sig.args);
    return htp_set_error(err, err_size, "out of memory");
  }
  int status = 0;
  for (int i = 0, input = 0; i < sig->num_args && !status; i++) {
    htp_sig_tensor *arg = &global_sig.args[i];
    *arg = sig->args[i];
    memcpy(arg->dims, arg->global_dims, sizeof arg->dims);
    arg->count = arg->global_count;
    arg->bytes = arg->global_bytes;
    arg->shard_layout = HTP_SHARD_NONE;
    if (!(state->global[i] = htp_aligned_buffer(arg->bytes))) {
      status = htp_set_error(err, err_size, "out of memory allocating %zu bytes for argument '%s'",
                             arg->bytes, arg->name);
    } else if (arg->role == HTP_SIG_INPUT && options->num_inputs) {
      status = htp_bind_input(options->inputs[input++], arg, state->global[i], err, err_size);
    } else if (arg->role == HTP_SIG_INPUT || !options->weights) {
      htp_fill_random(arg, i, options->seed, state->global[i]);
    }
  }
  if (!status && options->weights)
    status = htp_bind_weights(options->weights, &global_sig, (void *const *)state->global, err,
                              err_size);
  free(global_sig.args);
  return status;
}

/* Host copies of rank r's results, which it downloads after its run. */
static int make_rank_results(htp_run_state *state, int rank, char *err, size_t err_size) {
  const htp_signature *sig = &state->sig;
  void **results = calloc((size_t)sig->num_results + 1, sizeof *results);
  if (!results)
    return htp_set_error(err, err_size, "out of memory");
  state->results[rank] = results;
  for (int k = 0; k < sig->num_results; k++)
    if (!(results[k] = htp_aligned_buffer(sig->results[k].bytes)))
      return htp_set_error(err, err_size, "out of memory allocating %zu bytes for result %d of "
                           "rank %d", sig->results[k].bytes, k, rank);
  return 0;
}

/* Warns about NaN or inf in a result: a wrong block, or bad weights. */
static void check_finite(const htp_sig_tensor *result, const void *data) {
  int64_t bad = 0;
  for (int64_t i = 0; i < result->count; i++)
    bad += !isfinite(result->dtype == HTP_SIG_BF16 ? htp_bf16_to_f32(((const htp_bf16 *)data)[i])
                                                   : ((const float *)data)[i]);
  if (bad)
    fprintf(stderr, "htp-run: warning: result '%s' holds %lld non-finite values\n", result->name,
            (long long)bad);
}

/* --sms as htp_config.sm_counts: one entry per rank, 0 (the whole GPU) for
 * the ranks not named. */
static int make_sm_counts(const htp_run_options *options, htp_run_state *state, char *err,
                          size_t err_size) {
  if (!options->num_sms)
    return 0;
  if (!(state->sm_counts = calloc((size_t)state->tp, sizeof *state->sm_counts)))
    return htp_set_error(err, err_size, "out of memory");
  for (int i = 0; i < options->num_sms; i++)
    state->sm_counts[options->sms[i].rank] = options->sms[i].count;
  return 0;
}

/* The data inputs and outputs asked for match the block's. */
static int check_files(const htp_run_options *options, const htp_signature *sig, char *err,
                       size_t err_size) {
  int num_inputs = 0;
  for (int i = 0; i < sig->num_args; i++)
    num_inputs += sig->args[i].role == HTP_SIG_INPUT;
  if (options->num_inputs && options->num_inputs != num_inputs)
    return htp_set_error(err, err_size, "%s takes %d data input%s but --input was given %d "
                         "time%s", sig->entry, num_inputs, num_inputs == 1 ? "" : "s",
                         options->num_inputs, options->num_inputs == 1 ? "" : "s");
  if (options->num_outputs > sig->num_results)
    return htp_set_error(err, err_size, "%s returns %d result%s but --output was given %d times",
                         sig->entry, sig->num_results, sig->num_results == 1 ? "" : "s",
                         options->num_outputs);
  return 0;
}

/* Reports a failed run: the first failure, then the others that followed. */
static int fail_run(const htp_run_state *state, const char *err) {
  errors_muted = 0;
  if (!state->outcome.failed)
    return fail(err);
  fail(state->outcome.message);
  for (const char *line = state->outcome.notes, *end; *line; line = end + 1) {
    if (!(end = strchr(line, '\n')))
      break;
    fprintf(stderr, "htp-run: note: then %.*s\n", (int)(end - line), line);
  }
  return EXIT_ERROR;
}

/* Each result at its global shape (state->outputs): a sharded gradient
 * placed together from every rank's shard, anything else rank 0's. Under
 * mpi each process holds its own rank's results only, so a sharded one is
 * refused where it is asked for (--output, --check). */
static int gather_outputs(const htp_run_options *options, htp_run_state *state, int mpi,
                          char *err, size_t err_size) {
  const htp_signature *sig = &state->sig;
  /* At least one slot: the signature's count is >= 0, which the
   * compiler cannot see. */
  const size_t slots = sig->num_results > 0 ? (size_t)sig->num_results : 1;
  if (!(state->outputs = calloc(slots, sizeof *state->outputs)))
    return htp_set_error(err, err_size, "out of memory");
  char reason[512];
  for (int r = 0; r < sig->num_results; r++) {
    const htp_sig_tensor *result = &sig->results[r];
    if (result->shard_layout == HTP_SHARD_NONE) {
      state->outputs[r] = state->results[0][r];
      continue;
    }
    if (mpi) {
      if (r < options->num_outputs || options->check)
        return htp_set_error(err, err_size, "result '%s' is sharded over the ranks (the "
                             "gradient of a split parameter), and under mpirun htp-run does "
                             "not gather it for %s; run it with the local backend (no mpirun)",
                             result->name, r < options->num_outputs ? "--output" : "--check");
      continue;
    }
    if (!(state->outputs[r] = htp_aligned_buffer(result->global_bytes)))
      return htp_set_error(err, err_size, "out of memory gathering result '%s'", result->name);
    for (int rank = 0; rank < state->tp; rank++)
      if (htp_shard_place(state->results[rank][r], state->outputs[r], result->element_size,
                          result->rank, result->dims, result->shard_dim, result->shard_parts,
                          rank, result->shard_layout, result->shard_units, result->shard_unit,
                          reason, sizeof reason))
        return htp_set_error(err, err_size, "gathering result '%s': %s", result->name, reason);
  }
  return 0;
}

/* The results: finite, replicated ones the same on every local rank,
 * gathered to their global shapes and written out. */
static int finish_results(const htp_run_options *options, htp_run_state *state, int mpi,
                          char *err, size_t err_size) {
  const htp_signature *sig = &state->sig;
  for (int rank = 0; rank < state->tp && (!mpi || rank == 0); rank++)
    for (int r = 0; r < sig->num_results; r++)
      if (rank == 0 || sig->results[r].shard_layout != HTP_SHARD_NONE)
        check_finite(&sig->results[r], state->results[rank][r]);
  for (int rank = 1; rank < state->tp && !mpi; rank++)
    for (int r = 0; r < sig->num_results; r++)
      if (sig->results[r].shard_layout == HTP_SHARD_NONE &&
          memcmp(state->results[0][r], state->results[rank][r], sig->results[r].bytes))
        fprintf(stderr, "htp-run: warning: result '%s' of rank %d differs from rank 0's\n",
                sig->results[r].name, rank);
  if (gather_outputs(options, state, mpi, err, err_size))
    return 1;
  char reason[1024];
  for (int r = 0; r < options->num_outputs; r++) {
    const htp_sig_tensor *result = &sig->results[r];
    /* .npy has no bf16: a bf16 result is written widened to <f4 (exact). */
    float *wide = NULL;
    if (result->dtype == HTP_SIG_BF16) {
      if (!(wide = malloc((size_t)result->global_count * sizeof *wide)))
        return htp_set_error(err, err_size, "out of memory widening result '%s'", result->name);
      htp_bf16_to_f32_n(state->outputs[r], wide, result->global_count);
    }
    int failed = htp_npy_write(options->outputs[r], result->rank, result->global_dims,
                               wide ? wide : state->outputs[r], reason, sizeof reason);
    free(wide);
    if (failed)
      return htp_set_error(err, err_size, "%s: %s", options->outputs[r], reason);
  }
  return 0;
}

/* --device cuda in a build without CUDA: refused before the data is bound
 * (a world is cheap; no context is made, so no GPU is touched here: a
 * missing GPU shows when the ranks start). After the command line's checks
 * against the block, so that those say the same in every build. */
static int check_device(const htp_run_state *state, char *err, size_t err_size) {
  if (state->device != HTP_DEVICE_CUDA)
    return 0;
  htp_ranks *probe = NULL;
  if (htp_ranks_open(&probe, HTP_BACKEND_LOCAL, 1, 0, 0, 60.0, HTP_DEVICE_CUDA, HTP_MATMUL_F32,
                     NULL, err, err_size))
    return 1;
  htp_ranks_close(probe);
  return 0;
}

/* On the checked device a host load or store through device memory faults
 * (kernels/checked/arena.c): say so before the crash, then die of the
 * signal as before (async-signal-safe: write, signal, raise, pause). Ranks
 * fault together: the first explains and dies, the others wait for that. */
static volatile sig_atomic_t checked_fault_seen;

static void checked_device_fault(int signal_number, siginfo_t *info, void *context) {
  (void)context;
  if (checked_fault_seen)
    for (;;)
      pause();
  checked_fault_seen = 1;
  /* The arena's addresses have bit 62 set (kernels/checked/arena.c), which
   * makes them non-canonical: a general protection fault, for which the
   * kernel reports no address (SI_KERNEL). A fault elsewhere (a NULL write,
   * a stack overflow, memory short) is another crash, said as such. */
  const uintptr_t address = (uintptr_t)info->si_addr;
  static const char device[] =
      "htp-run: crashed on the checked device: most likely host code read or wrote device "
      "memory (an address with bit 62 set), which would be garbage or a fault on a GPU; "
      "gdb's backtrace shows where\n";
  static const char other[] =
      "htp-run: crashed on the checked device, at an address that is not device memory (not "
      "a host access of device memory: memory short, a stack overflow, a bug); gdb's "
      "backtrace shows where\n";
  const int tagged = info->si_code == SI_KERNEL || (address >> 62 & 1) != 0;
  ssize_t written = write(STDERR_FILENO, tagged ? device : other,
                          tagged ? sizeof device - 1 : sizeof other - 1);
  (void)written;
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

static void explain_checked_faults(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = checked_device_fault;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, NULL);
  sigaction(SIGBUS, &action, NULL);
}

/* SIGINT, SIGTERM, SIGHUP: the temporaries being written are removed (the
 * old files stay, whole), then the process dies of the signal as before. */
static void stop_on_signal(int signal_number) {
  htp_file_remove_unfinished();
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

static void remove_temporaries_when_stopped(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = stop_on_signal;
  sigemptyset(&action.sa_mask);
  const int stops[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) {
    struct sigaction before;
    /* A signal the caller ignores (nohup) stays ignored. */
    if (sigaction(stops[i], NULL, &before) == 0 && before.sa_handler != SIG_IGN)
      sigaction(stops[i], &action, NULL);
  }
}

/* mpi and nccl: the world first, from the launcher (its size is the tp,
 * and only rank 0 reports). Non-zero with err. */
static int open_launcher_world(const htp_run_options *options, htp_run_state *state,
                               htp_backend backend, long *requested, char *err,
                               size_t err_size) {
  /* Without a launcher MPI_Init would make a world of one, silently. */
  if (!htp_host_mpi_launcher()) {
    htp_set_error(err, err_size, "--backend %s must be started by an MPI launcher, one "
                  "process per rank (mpirun -np N htp-run ... --backend %s%s); no launcher's "
                  "environment was found (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, ...). "
                  "For ranks in this process use --backend local", options->backend,
                  options->backend, backend == HTP_BACKEND_NCCL ? " --device cuda" : "");
    return 1;
  }
  /* The world first: its size is the tp, and only rank 0 reports. Under
   * --elastic a hung process ends itself (the fence), so that the others
   * shrink it away as a killed one; where MPI cannot shrink, --elastic is
   * refused later with what would do. */
  const int fence = backend == HTP_BACKEND_MPI && options->train.elastic_given &&
                    htp_backend_can_shrink(HTP_BACKEND_MPI);
  if (htp_ranks_open(&state->ranks, backend, 0, (int)options->train.standby, fence,
                     options->timeout_s, state->device, options->matmul_precision, NULL, err, err_size))
    return 1;
  int size = htp_ranks_size(state->ranks);
  /* A standby (--standby) has no rank until it joins: past every rank, so
   * it reports nothing and holds what one process holds. */
  state->process_rank = htp_ranks_is_standby(state->ranks) ? size
                                                           : htp_ranks_process_rank(state->ranks);
  errors_muted = state->process_rank != 0;
  if (options->tp_given && options->tp != size) {
    const long standbys = options->train.standby;
    htp_set_error(err, err_size, "--tp %ld but mpirun started %ld processes%s: they must be "
                  "equal (mpirun -np %ld)", options->tp, size + standbys,
                  standbys ? " less the standbys" : "", options->tp + standbys);
    return 1;
  }
  *requested = size;
  return 0;
}

/* --train, after the world (mpi) and the file kind are known. */
static int run_training(const htp_run_options *options, const htp_compiler *jit,
                        htp_run_state *state, int mpi, long requested) {
#ifdef HTP_RUN_HAVE_TRAIN
  char err[16384];
  state->tp = (int)requested; /* --sms's table; the entry's own tp is checked later */
  if (make_sm_counts(options, state, err, sizeof err) ||
      (!mpi && check_device(state, err, sizeof err)))
    return fail(err);
  int status = htp_train(options, jit, state, &state->ranks, (int)requested, err, sizeof err);
  errors_muted = mpi && state->process_rank != 0; /* --elastic: a shrink renumbers the ranks */
  if (mpi && status == 1)
    return fail_process(state, err);
  if (mpi && state->process_rank != 0)
    return status ? EXIT_ERROR : 0;
  if (status == 1)
    return fail(err);
  if (status == 2)
    return fail_run(state, err);
  return 0;
#else
  (void)options, (void)jit, (void)state, (void)mpi, (void)requested;
  return fail("--train: this htp-run was built without zlib (the training data's reader); "
              "install zlib1g-dev and rebuild");
#endif
}

/* Rank 0 after the run: the outputs, --check, the table or JSON report,
 * and the check's verdict. */
static int report_run(const htp_run_options *options, const htp_compiler *jit,
                      htp_run_state *state, int mpi) {
  char err[16384];
  const htp_signature *sig = &state->sig;
  if (finish_results(options, state, mpi, err, sizeof err))
    return fail(err);
  if (options->check && htp_run_check(options, jit, state, err, sizeof err))
    return fail(err);
  if (htp_summarise_ranks(options, state))
    return fail("out of memory");
  if (htp_report(options, state, err, sizeof err))
    return fail(err);
  if (fflush(stdout) != 0)
    return fail("cannot write the report to stdout");
  if (state->check_errors)
    for (int r = 0; r < sig->num_results; r++)
      if (htp_check_failed(state, r)) {
        htp_set_error(err, sizeof err, "--check: result '%s' differs from the unsplit block by "
                      "%.3e (relative), above the tolerance %g", sig->results[r].name,
                      state->check_errors[r], htp_check_tolerance(state));
        return fail(err);
      }
  return 0;
  return 0;
}

/* The device, and whether the file is a shared object this htp-run can
 * run as asked (a .mlir needs the JIT; --check of a .so only on a GPU).
 * Non-zero with err. */
static int open_input(const htp_run_options *options, const htp_compiler *jit,
                      htp_run_state *state, char *err, size_t err_size) {
  state->device = strcmp(options->device, "cuda") == 0      ? HTP_DEVICE_CUDA
                  : strcmp(options->device, "checked") == 0 ? HTP_DEVICE_CHECKED
                                                            : HTP_DEVICE_CPU;
  state->matmul_precision = options->matmul_precision;
  if (state->device == HTP_DEVICE_CHECKED)
    explain_checked_faults();
  state->process_rank = -1;
  int shared = is_shared_object(options->path, err, err_size);
  if (shared < 0)
    return 1;
  state->shared = shared;
  if (!shared && !jit)
    return htp_set_error(err, err_size,
                         "%s: this htp-run was built without MLIR, so it cannot compile .mlir "
                         "files; compile with htp-compile elsewhere and run the .so",
                         options->path);
  /* The command line's faults, found once the file's kind is known: exit 2. */
  state->bad_command_line = 1;
  if (shared && options->num_shares)
    return htp_set_error(err, err_size, "--shares splits a .mlir as it is compiled: %s was "
                         "compiled with its split (htp-compile --shares); leave --shares out",
                         options->path);
  if (shared && options->spare)
    return htp_set_error(err, err_size, "--spare makes room in a .mlir's split as it is "
                         "compiled: %s was compiled with its room (htp-compile --spare); leave "
                         "--spare out", options->path);
  if (!shared && options->spare && options->tp < 2)
    return htp_set_error(err, err_size, "--spare %ld is room in a tensor-parallel split: it "
                         "needs --tp 2 or more (or --shares)", options->spare);
  state->bad_command_line = 0;
  /* On the CPU a .so has no other build to compare with; on a GPU a tp-1
   * .so is compared with itself on the CPU (checked once its tp is known). */
  if (shared && options->check && state->device != HTP_DEVICE_CUDA)
    return htp_set_error(err, err_size, "--check needs the JIT (it compiles the block again at "
                         "tp 1); %s is a shared object: run --check on the .mlir",
                         options->path);
  return 0;
}

/* The entry loaded (JIT or .so) for `requested` ranks and its signature
 * parsed. Non-zero with err. */
static int load_entry(const htp_run_options *options, const htp_compiler *jit,
                      htp_run_state *state, long requested, char *err, size_t err_size) {
  state->loader = state->shared ? htp_so_loader() : jit;
  htp_compile_options compile = {.tp = (int)requested, .shares = options->shares,
                                 .num_shares = options->num_shares,
                                 .spare = (int)options->spare};
  if (state->loader->load(options->path, options->entry, &compile, &state->compiled, err,
                          err_size)) {
    state->loader = NULL;
    return 1;
  }
  char reason[1024];
  const char *text = state->compiled.signature;
  if (htp_signature_parse(text, text ? strlen(text) : 0, &state->sig, reason, sizeof reason) !=
      HTP_OK)
    return htp_set_error(err, err_size, "%s: bad entry signature: %s", options->path, reason);
  /* A bf16 block's products take bf16 operands already. */
  if (options->matmul_precision != HTP_MATMUL_F32 && state->sig.num_args > 0 &&
      state->sig.args[0].dtype == HTP_SIG_BF16)
    fprintf(stderr, "htp-run: note: --matmul-precision %s changes an f32 block's products; "
            "%s's are bf16 already (its linears round their operands as they are stored)\n",
            htp_run_matmul_precision_name(options->matmul_precision), options->path);
  if (state->shared && options->check && state->sig.tp != 1)
    return htp_set_error(err, err_size, "--check of a shared object compares it with itself on "
                         "the CPU, so it needs a tp-1 .so; %s is for tp %d: check a tp-1 build "
                         "(htp-compile --tp 1), or run --check on the .mlir", options->path,
                         state->sig.tp);
  return 0;
}

/* Everything the ranks need before they start: tp and device checked, the
 * balancer's configuration, the files, host memory, the global data, the
 * results' buffers, the local world and its faults, the BLAS threads.
 * Non-zero with err. */
static int prepare_run(const htp_run_options *options, htp_run_state *state, int mpi,
                       long requested, htp_rank_job *job, char *err, size_t err_size) {
  const htp_signature *sig = &state->sig;
  if (htp_run_check_tp(options, state->shared, requested, state, err, err_size) ||
      (!mpi && check_device(state, err, err_size)))
    return 1;
  /* Host memory: the global arguments and the ranks' staging; on the CPU
   * the ranks' buffers too (its memory is host memory), not on a GPU. */
  const int local_ranks = mpi ? 1 : state->tp;
  if (make_sm_counts(options, state, err, err_size) ||
      htp_run_balance_config(options, state, job, err, err_size) ||
      check_files(options, sig, err, err_size) ||
      htp_run_check_memory(options->path, htp_run_host_staging_bytes(sig, local_ranks), sig,
                           state->device != HTP_DEVICE_CUDA ? local_ranks : 0, 1,
                           &state->held_bytes, err, err_size) ||
      bind_global_data(options, state, err, err_size))
    return 1;
  state->results = calloc((size_t)state->tp, sizeof *state->results);
  if (!state->results)
    return htp_set_error(err, err_size, "out of memory");
  for (int r = 0; r < state->tp; r++)
    if ((!mpi || r == state->process_rank) && make_rank_results(state, r, err, err_size))
      return 1;
  if (!mpi && htp_ranks_open(&state->ranks, HTP_BACKEND_LOCAL, state->tp, 0, 0, options->timeout_s,
                             state->device, options->matmul_precision, state->sm_counts, err,
                             err_size))
    return 1;
  if (htp_ranks_add_faults(state->ranks, options->faults, options->num_faults, err, err_size))
    return 1;
  htp_run_choose_blas_threads(state, mpi);
  job->fn = state->compiled.fn;
  job->sig = sig;
  job->global = (const void *const *)state->global;
  job->results = (void *const *const *)state->results;
  job->warmup = options->warmup;
  job->iters = options->iters;
  job->slows = options->slows;
  job->num_slows = options->num_slows;
  job->faults = options->faults;
  job->num_faults = options->num_faults;
  job->trace_path = options->trace;
  job->profile = options->profile;
  return 0;
}

static int run(const htp_run_options *options, const htp_compiler *jit, htp_run_state *state) {
  char err[16384];
  /* mpi and nccl: one process per rank under mpirun. */
  const int nccl = strcmp(options->backend, "nccl") == 0;
  const int mpi = nccl || strcmp(options->backend, "mpi") == 0;
  const htp_backend backend = nccl ? HTP_BACKEND_NCCL : mpi ? HTP_BACKEND_MPI : HTP_BACKEND_LOCAL;
  if (open_input(options, jit, state, err, sizeof err))
    return fail(err);
  /* mpirun -np N with the local backend: N copies of the whole job, which
   * would race to write the same files (each renaming its FILE.tmp over
   * the others'): refused where there are any. */
  if (!mpi && htp_host_mpi_world_size() > 1) {
    const char *output = htp_run_first_output(options);
    if (output) {
      state->bad_command_line = 1;
      snprintf(err, sizeof err, "started as one of %d processes by an MPI launcher with "
               "--backend local, each running the whole job: all of them would write %s's "
               "file; for one rank a process use --backend mpi", htp_host_mpi_world_size(),
               output);
      return fail(err);
    }
    fprintf(stderr, "htp-run: note: started as one of %d processes by an MPI launcher, with "
            "--backend local: each process runs the whole job on its own (for one rank a "
            "process: --backend mpi)\n", htp_host_mpi_world_size());
  }
  long requested = options->tp;
  if (mpi && open_launcher_world(options, state, backend, &requested, err, sizeof err))
    return fail(err);
  if (options->train.enabled)
    return run_training(options, jit, state, mpi, requested);
  htp_rank_job job;
  memset(&job, 0, sizeof job);
  if (load_entry(options, jit, state, requested, err, sizeof err) ||
      prepare_run(options, state, mpi, requested, &job, err, sizeof err))
    return mpi ? fail_process(state, err) : fail(err);
  errors_muted = 0; /* from here on, each process reports its own rank */
  int failed = htp_ranks_run(state->ranks, &job, &state->outcome, err, sizeof err);
  if (mpi && state->process_rank != 0)
    errors_muted = 1; /* after the run only rank 0 works */
  if (failed)
    return fail_run(state, err);
  if (mpi && state->process_rank != 0)
    return 0; /* rank 0 reports and writes the outputs */
  return report_run(options, jit, state, mpi);
}

/* Whether what was written to stdout failed to arrive (a full disk, a
 * closed pipe); said on stderr. */
static int stdout_failed(void) {
  const int flushed = fflush(stdout) == 0, why = flushed ? 0 : errno;
  if (flushed && !ferror(stdout))
    return 0;
  fprintf(stderr, "htp-run: error: cannot write to stdout: %s\n",
          why ? strerror(why) : "a write to it failed (a full disk, a closed pipe?)");
  return 1;
}

int htp_run_main(int argc, char **argv, const htp_compiler *jit) {
  htp_run_options options;
  char err[1024];
  if (htp_run_parse_options(argc, argv, &options, err, sizeof err)) {
    fprintf(stderr, "htp-run: error: %s (see htp-run --help)\n", err);
    return EXIT_USAGE;
  }
  if (options.help) {
    htp_run_print_help(stdout);
    return stdout_failed() ? EXIT_FAILURE : 0;
  }
  /* Flags that cannot go together, outputs that name one file: the command
   * line's fault too (exit 2), found before anything is read. */
  if (htp_run_check_implemented(&options, err, sizeof err) ||
      htp_run_check_paths(&options, err, sizeof err)) {
    fail(err);
    return EXIT_USAGE;
  }
  /* A write past the file size limit (ulimit -f) then fails with EFBIG,
   * which the writers report (and remove their temporary), instead of the
   * signal killing the process half way. */
  signal(SIGXFSZ, SIG_IGN);
  remove_temporaries_when_stopped();
  if (jit && jit->exit_on_out_of_memory)
    jit->exit_on_out_of_memory("htp-run", htp_file_remove_unfinished);
  htp_run_state state;
  memset(&state, 0, sizeof state);
  int status = run(&options, jit, &state);
  if (status == EXIT_ERROR && state.bad_command_line)
    status = EXIT_USAGE;
  release(&state);
  /* What went to stdout (a training's epoch lines too) must have arrived. */
  if (status == 0 && stdout_failed())
    status = EXIT_FAILURE;
  return status;
}
