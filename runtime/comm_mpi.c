/*===- runtime/comm_mpi.c - the mpi backend: one process per rank ---------===*
 *
 * Every call is non-blocking MPI polled with MPI_Test against the deadline,
 * so a hung peer becomes HTP_ERR_TIMEOUT instead of a hang. Each world
 * works on two duplicates of MPI_COMM_WORLD: `comm` for the data and
 * `notice_comm` for failure notices. Every process keeps one receive posted
 * on notice_comm; when a world fails on one process (deadline, abort, bad
 * argument), it sends {code, origin} to every peer, and their polling loops
 * see it: that is how HTP_ERR_REMOTE and HTP_ERR_TIMEOUT reach the other
 * ranks, and how a rank hung by fault injection is released.
 *
 * A collective cannot be cancelled, so one that timed out may still write
 * its buffer later: collectives therefore run on a staging buffer owned by
 * the world, copied in and out (one extra copy each way), and a staging
 * buffer left behind by a failed collective is never reused. The sum is
 * MPI_Iallreduce: NOT guaranteed in rank order or bitwise reproducible (that
 * depends on Open MPI's algorithm choice).
 *
 * htp_world_destroy is collective: it first waits (up to the deadline) for
 * every process to reach it; then MPI_Finalize is safe. If some process
 * never comes, a world that initialized MPI calls MPI_Abort(MPI_COMM_WORLD,
 * 1) rather than hang in MPI_Finalize; a world that did not leaves MPI to
 * the application.
 *
 * A process that dies. Built against an MPI with ULFM (Open MPI 5's
 * <mpi-ext.h>: MPIX_Comm_shrink) and launched with `mpirun --with-ft ulfm`,
 * the survivors' calls that involve the dead process return
 * MPIX_ERR_PROC_FAILED: the world fails with HTP_ERR_REMOTE naming the lost
 * rank, and htp_world_shrink (shrink_init) revokes the old communicators,
 * shrinks `comm` to the live processes and makes a world of them; the old
 * world's destroy then neither meets nor finalizes (the new world owns
 * MPI). Without ULFM, mpirun ends the whole job when a process dies.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "runtime/comm_internal.h"

#include <limits.h>
#include <mpi.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

enum { NOTICE_TAG = 1 };
enum { MEET_RELEASE = 1, MEET_JOIN = 2 }; /* what a meeting with the standbys does */

/* ULFM: Open MPI's fault-tolerance extension, where this MPI has it. */
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && defined(MPIX_ERR_PROC_FAILED) && \
    defined(OMPI_HAVE_MPIX_COMM_GET_FAILED) && defined(OMPI_HAVE_MPIX_COMM_ACK_FAILED)
#define HTP_MPI_ULFM 1
#endif

typedef struct mpi_world {
  MPI_Comm comm;
  MPI_Comm notice_comm;
  int owns_mpi; /* htp called MPI_Init_thread and must finalize */
  int tag_upper_bound;
  int notice_in[2];
  MPI_Request notice_request;
  int notice_out[2];
  MPI_Request *notice_sends; /* [size] */
  void *staging;
  size_t staging_size;
  /* Staging buffers of failed collectives, which MPI may still write: freed
   * only after MPI_Finalize. */
  void **abandoned;
  int abandoned_count;
  int shrunk; /* htp_world_shrink made a world from this one: destroy neither meets nor finalizes */
  int after_loss; /* MPI_COMM_WORLD holds dead processes (a shrink) or standbys: no finalize */
  int standby;    /* a standby process's world: no ranks, no communicators */
  /* config.fence (the fence below): waits of this process on the world now,
   * when the last one ended (0: none yet, the fence not armed), its thread. */
  atomic_int waiting;
  _Atomic double idle_since;
  atomic_int fence_done;
  pthread_t fence_thread;
  int fence_started;
} mpi_world;

static mpi_world *state_of(htp_world *world) { return (mpi_world *)world->backend; }

static int failed(htp_world *world) { return atomic_load(&world->fail_code) != HTP_OK; }

static const char *mpi_message(int code, char *buffer) {
  int length = 0;
  if (MPI_Error_string(code, buffer, &length) != MPI_SUCCESS)
    snprintf(buffer, MPI_MAX_ERROR_STRING, "MPI error %d", code);
  return buffer;
}

/* ===== Lost processes (ULFM) ============================================ */

/* Whether an MPI error class says a peer process died (or a survivor
 * revoked the communicator because one did). */
static int process_failed(int error_class) {
#ifdef HTP_MPI_ULFM
  return error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_PROC_FAILED_PENDING ||
         error_class == MPIX_ERR_REVOKED;
#else
  (void)error_class;
  return 0;
#endif
}

/* The lowest rank of comm's processes known to have failed (-1: none
 * known, or no ULFM), and how many failed in *count. */
static int first_failed_rank(MPI_Comm comm, int *count) {
  *count = 0;
#ifdef HTP_MPI_ULFM
  MPI_Group failed_group, group;
  if (MPIX_Comm_get_failed(comm, &failed_group) != MPI_SUCCESS) return -1;
  MPI_Group_size(failed_group, count);
  MPI_Comm_group(comm, &group);
  int first = 0, rank = -1;
  if (*count > 0) MPI_Group_translate_ranks(failed_group, 1, &first, group, &rank);
  MPI_Group_free(&failed_group);
  MPI_Group_free(&group);
  return rank;
#else
  (void)comm;
  return -1;
#endif
}

/* A call of `what` found a dead peer: the world fails with HTP_ERR_REMOTE,
 * naming the first lost rank as its origin. */
static htp_result fail_lost(htp_ctx *ctx, const char *what) {
  int count = 0;
  const int lost = first_failed_rank(state_of(ctx->world)->comm, &count);
  htp__ctx_error(ctx, HTP_ERR_REMOTE,
                 "%s: rank %d's process died (%d lost; htp_world_shrink goes on without it)",
                 what, lost, count);
  htp__world_fail(ctx->world, ctx, HTP_ERR_REMOTE, lost, "rank %d: %s", ctx->rank,
                  ctx->last_error);
  return HTP_ERR_REMOTE;
}

/* A failed MPI call of `what`: a dead peer (fail_lost), a message longer
 * than the receive buffer (the caller's mistake), or MPI's own error. */
static htp_result mpi_failure(htp_ctx *ctx, int rc, const char *what) {
  int error_class = 0;
  MPI_Error_class(rc, &error_class);
  if (process_failed(error_class)) return fail_lost(ctx, what);
  char text[MPI_MAX_ERROR_STRING];
  return htp__fail(ctx, error_class == MPI_ERR_TRUNCATE ? HTP_ERR_INVALID : HTP_ERR_SYSTEM,
                   "%s: %s", what, mpi_message(rc, text));
}

#define MPI_CALL(ctx, call)                                                                    \
  do {                                                                                         \
    int mpi_rc_ = (call);                                                                      \
    if (mpi_rc_ != MPI_SUCCESS) return mpi_failure((ctx), mpi_rc_, #call " failed");           \
  } while (0)

/* ===== Failure notices ================================================== */

/* Looks for a failure notice from a peer; fails the world when one came. */
static void poll_notice(htp_world *world, htp_ctx *ctx) {
  mpi_world *state = state_of(world);
  if (state->notice_request == MPI_REQUEST_NULL) return;
  int arrived = 0;
  MPI_Status status;
  if (MPI_Test(&state->notice_request, &arrived, &status) != MPI_SUCCESS || !arrived) return;
  int code = state->notice_in[0], origin = state->notice_in[1];
  if (code <= HTP_OK || code >= HTP_RESULT_COUNT) code = HTP_ERR_REMOTE;
  htp__world_fail(world, ctx, (htp_result)code, origin, "rank %d reported: %s", status.MPI_SOURCE,
                  htp_strerror((htp_result)code));
}

static void mpi_notify_failure(htp_world *world, htp_ctx *ctx) {
  (void)ctx;
  mpi_world *state = state_of(world);
  state->notice_out[0] = atomic_load(&world->fail_code);
  state->notice_out[1] = atomic_load(&world->fail_origin);
  for (int peer = 0; peer < world->size; ++peer) {
    if (peer == world->process_rank || state->notice_sends[peer] != MPI_REQUEST_NULL) continue;
    MPI_Isend(state->notice_out, 2, MPI_INT, peer, NOTICE_TAG, state->notice_comm,
              &state->notice_sends[peer]);
  }
}

/* ===== Waiting ========================================================== */

/* A wait on the world begins / ends (the fence's clock, below). */
static void wait_begins(mpi_world *state) { atomic_fetch_add(&state->waiting, 1); }
static void wait_ends(mpi_world *state) {
  atomic_store(&state->idle_since, htp_now());
  atomic_fetch_sub(&state->waiting, 1);
}

/* Polls request until it completes, the world fails or the deadline passes.
 * Spins briefly, then sleeps in growing steps (ranks may share cores). */
static htp_result poll_request(htp_ctx *ctx, MPI_Request *request, MPI_Status *status,
                               double deadline, const char *what) {
  htp_world *world = ctx->world;
  double pause = 2e-6;
  for (int round = 0;; ++round) {
    int done = 0;
    MPI_Status local_status;
    int rc = MPI_Test(request, &done, status ? status : &local_status);
    if (rc != MPI_SUCCESS) return mpi_failure(ctx, rc, what);
    if (done) return HTP_OK;
    poll_notice(world, ctx);
    if (failed(world)) return htp__check_failed(ctx, what);
    if (htp_now() > deadline)
      return htp__fail(ctx, HTP_ERR_TIMEOUT, "%s: rank %d waited %.3g s for its peers", what,
                       ctx->rank, world->config.timeout_s);
    /* Open MPI's TCP transport moves a large message only while someone
     * polls it: the back-off stops at 0.1 ms (at 1 ms a ViT-B snapshot's
     * transfers took 1.6 s instead of 1.24). */
    if (round < 64) {
      sched_yield();
    } else {
      htp__sleep(pause);
      if (pause < 1e-4) pause *= 2;
    }
  }
}

static htp_result wait_request(htp_ctx *ctx, MPI_Request *request, MPI_Status *status,
                               double deadline, const char *what) {
  mpi_world *state = state_of(ctx->world);
  wait_begins(state);
  const htp_result rc = poll_request(ctx, request, status, deadline, what);
  wait_ends(state);
  return rc;
}

/* ===== World ============================================================ */

static int fence_start(htp_world *world, char *message, size_t message_size);
static void fence_stop(mpi_world *state);

/* The world's state over the processes of `base`: two duplicates of it
 * (data, notices) returning errors instead of aborting, the tag bound, the
 * notice receive posted. 0, or -1 with message written. */
static int attach(htp_world *world, mpi_world *state, MPI_Comm base, char *message,
                  size_t message_size) {
  int size = 0, rank = 0;
  MPI_Comm_size(base, &size);
  MPI_Comm_rank(base, &rank);
  state->notice_sends = malloc((size_t)size * sizeof *state->notice_sends);
  if (!state->notice_sends || MPI_Comm_dup(base, &state->comm) != MPI_SUCCESS ||
      MPI_Comm_dup(base, &state->notice_comm) != MPI_SUCCESS) {
    snprintf(message, message_size, "htp_world_create: MPI_Comm_dup failed");
    free(state->notice_sends);
    return -1;
  }
  for (int peer = 0; peer < size; ++peer) state->notice_sends[peer] = MPI_REQUEST_NULL;
  MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(state->notice_comm, MPI_ERRORS_RETURN);
  int *upper_bound = NULL, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &upper_bound, &flag);
  state->tag_upper_bound = flag && upper_bound ? *upper_bound : 32767;
  MPI_Irecv(state->notice_in, 2, MPI_INT, MPI_ANY_SOURCE, NOTICE_TAG, state->notice_comm,
            &state->notice_request);
  world->size = size;
  world->process_rank = rank;
  world->backend = state;
  if (fence_start(world, message, message_size)) {
    MPI_Cancel(&state->notice_request);
    MPI_Request_free(&state->notice_request);
    MPI_Comm_free(&state->comm);
    MPI_Comm_free(&state->notice_comm);
    free(state->notice_sends);
    world->backend = NULL;
    return -1;
  }
  return 0;
}

#ifdef HTP_MPI_ULFM
/* ----- Watchdog ------------------------------------------------------------
 * The calls that repair a world after a death (MPIX_Comm_shrink's
 * agreement, the collectives on the shrunk communicator, a meeting) take no
 * deadline, and Open MPI 5's agreement was seen waiting for ever on a loaded
 * machine (DESIGN §12). While a process is in them a watchdog thread ends
 * it, saying so, once the world's timeout has passed: its peers then see
 * one more death (and end, or shrink again) instead of every process of the
 * job waiting for ever. */
typedef struct watchdog {
  pthread_mutex_t lock;
  pthread_cond_t finished;
  int done;
  double deadline; /* htp_now() seconds */
  double timeout_s;
  char who[32]; /* "rank 1", "a standby" */
  const char *what;
  pthread_t thread;
  int started;
} watchdog;

/* HTP_WATCHDOG_STACKS set (to diagnose the hang): every thread's stack,
 * by gdb attached to this process, on stderr before it ends. */
static void print_stacks(void) {
  char pid[32];
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  const pid_t child = fork();
  if (child == 0) {
    dup2(2, 1);
    execlp("gdb", "gdb", "-p", pid, "-batch", "-ex", "thread apply all bt", (char *)NULL);
    _exit(127);
  }
  for (int waited = 0; child > 0 && waited < 600; ++waited) { /* at most a minute */
    if (waitpid(child, NULL, WNOHANG) == child) return;
    htp__sleep(0.1);
  }
  if (child > 0) kill(child, SIGKILL);
}

/* A watchdog's last line, written without stdio: the thread it ends may
 * be stuck holding stdio's lock. */
static void say_ending(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void say_ending(const char *format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  const int n = vsnprintf(line, sizeof line, format, args);
  va_end(args);
  if (n > 0) (void)!write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n
                                                                       : sizeof line - 1);
}

static void *watch(void *arg) {
  watchdog *dog = arg;
  pthread_mutex_lock(&dog->lock);
  while (!dog->done) {
    const double left = dog->deadline - htp_now();
    if (left <= 0) {
      say_ending("htp: %s: %s did not return in %.3g s (the world's timeout; an Open MPI "
                 "fault-tolerance agreement that never ends, DESIGN §12): ending this "
                 "process\n", dog->who, dog->what, dog->timeout_s);
      if (getenv("HTP_WATCHDOG_STACKS")) print_stacks();
      _exit(1);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until); /* the condition's clock */
    const double step = left < 0.5 ? left : 0.5;
    until.tv_sec += (time_t)step;
    until.tv_nsec += (long)((step - (double)(time_t)step) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&dog->finished, &dog->lock, &until);
  }
  pthread_mutex_unlock(&dog->lock);
  return NULL;
}

/* Starts watching `what` (a string literal) for timeout_s; rank < 0: a
 * standby's. Without a thread the call is only unwatched. */
static void watchdog_start(watchdog *dog, const char *what, int rank, double timeout_s) {
  pthread_mutex_init(&dog->lock, NULL);
  pthread_cond_init(&dog->finished, NULL);
  dog->done = 0;
  dog->timeout_s = timeout_s;
  dog->deadline = htp_now() + timeout_s;
  if (rank >= 0) snprintf(dog->who, sizeof dog->who, "rank %d", rank);
  else snprintf(dog->who, sizeof dog->who, "a standby");
  dog->what = what;
  dog->started = pthread_create(&dog->thread, NULL, watch, dog) == 0;
}

static void watchdog_stop(watchdog *dog) {
  pthread_mutex_lock(&dog->lock);
  dog->done = 1;
  pthread_cond_signal(&dog->finished);
  pthread_mutex_unlock(&dog->lock);
  if (dog->started) pthread_join(dog->thread, NULL);
  pthread_cond_destroy(&dog->finished);
  pthread_mutex_destroy(&dog->lock);
}

/* ----- Fence ---------------------------------------------------------------
 * config.fence. A hung process (a kernel that never returns, a deadlock,
 * --fault hang) is alive: its peers' waits time out, and a shrink would keep
 * it. So a process that has waited on no call of its world for the world's
 * timeout, counted from the end of its last wait, ends itself as --fault die
 * does (SIGKILL), saying so; its peers, whose waits for it would time out
 * at about that moment, see a lost process instead (ULFM) and shrink it
 * away. A wait (every blocking call on the world: the polled waits, the
 * grow and release meetings) stops the clock: a process waiting for a hung
 * peer is not the hung one. The clock starts at the end of the first wait,
 * and again after htp_world_fence_rest, so that setup every process does at
 * once with no call to wait in (loading data, a new world's state) is not
 * timed; a hang there ends the run as before (the peers' deadline). The
 * thread looks every 50 ms; a shrink stops it, having its own watchdog. The
 * line goes out with write(2): a hung thread may hold stdio's lock. */
static void *fence_watch(void *arg) {
  htp_world *world = arg;
  mpi_world *state = state_of(world);
  const double timeout = world->config.timeout_s;
  while (!atomic_load(&state->fence_done)) {
    /* Idle only if no wait was open at either look and none ended between
     * them (wait_ends writes the clock before it closes the wait). */
    const int waiting = atomic_load(&state->waiting);
    const double since = atomic_load(&state->idle_since), now = htp_now();
    if (!waiting && since > 0 && now - since > timeout && atomic_load(&state->waiting) == 0 &&
        atomic_load(&state->idle_since) == since) {
      say_ending("htp: rank %d: no call on the world for %.3g s (its timeout) since its last "
                 "wait: taken as hung, this process ends so that its peers go on without it "
                 "(config.fence)\n", world->process_rank, timeout);
      if (getenv("HTP_WATCHDOG_STACKS")) print_stacks();
      raise(SIGKILL);
    }
    htp__sleep(0.05);
  }
  return NULL;
}

/* 0, or -1 when the fence's thread cannot start (message written). */
static int fence_start(htp_world *world, char *message, size_t message_size) {
  mpi_world *state = state_of(world);
  atomic_init(&state->waiting, 0);
  atomic_init(&state->idle_since, 0.0);
  atomic_init(&state->fence_done, 0);
  if (!world->config.fence) return 0;
  state->fence_started = pthread_create(&state->fence_thread, NULL, fence_watch, world) == 0;
  if (!state->fence_started)
    snprintf(message, message_size, "htp_world_create: config.fence: cannot start its thread");
  return state->fence_started ? 0 : -1;
}

static void fence_stop(mpi_world *state) {
  if (!state->fence_started) return;
  atomic_store(&state->fence_done, 1);
  pthread_join(state->fence_thread, NULL);
  state->fence_started = 0;
}

static void mpi_fence_rest(htp_world *world) {
  mpi_world *state = state_of(world);
  if (state && !state->standby) atomic_store(&state->idle_since, 0.0);
}

/* ----- Standbys' calls -----------------------------------------------------
 * A standby does not wait inside the meeting's shrink: it sat there for the
 * whole run once, and in a hang on a loaded machine its agreement over
 * MPI_COMM_WORLD and the survivors' shrink of their own world were found
 * waiting together (DESIGN §12). It waits for a call
 * instead, a receive polled with sleeps, and meets only then. Every active
 * process calls every waiting standby (the lead may die before it would),
 * each call carrying the meeting's number, so a standby drops the calls of
 * a meeting it already held. */
static struct {
  MPI_Comm comm;          /* MPI_COMM_WORLD's duplicate for calls and meetings */
  int meetings;           /* meetings held; every live process holds each one */
  int size;               /* MPI_COMM_WORLD's */
  unsigned char *waiting; /* [size]: a standby not yet joined (dead or alive) */
} standby_calls = {MPI_COMM_NULL, 0, 0, NULL};

/* A call is an empty message whose tag is the meeting's number (MPI
 * guarantees tags up to 32767; a job holds a meeting per rejoin, and one at
 * its end). */
static int call_tag(int meeting) { return meeting % 32768; }

/* Every process of MPI_COMM_WORLD, at the world's creation: the processes
 * from `actives` on wait. 0, or -1 with message written. */
static int standby_calls_init(int size, int actives, char *message, size_t message_size) {
  if (standby_calls.comm != MPI_COMM_NULL) {
    snprintf(message, message_size, "htp_world_create: this process already made a world with "
                                    "standbys (one per MPI job)");
    return -1;
  }
  standby_calls.waiting = calloc((size_t)size, 1);
  if (!standby_calls.waiting || MPI_Comm_dup(MPI_COMM_WORLD, &standby_calls.comm) != MPI_SUCCESS) {
    snprintf(message, message_size, "htp_world_create: MPI_Comm_dup for the standbys failed");
    free(standby_calls.waiting);
    standby_calls.waiting = NULL;
    return -1;
  }
  MPI_Comm_set_errhandler(standby_calls.comm, MPI_ERRORS_RETURN);
  standby_calls.size = size;
  for (int process = actives; process < size; ++process) standby_calls.waiting[process] = 1;
  return 0;
}

/* The actives' call to the next meeting, to every standby still waiting.
 * A send to a dead standby may fail: the meeting goes on without it. */
static void call_standbys(void) {
  for (int process = 0; process < standby_calls.size; ++process) {
    if (!standby_calls.waiting[process]) continue;
    MPI_Request request;
    if (MPI_Isend(NULL, 0, MPI_BYTE, process, call_tag(standby_calls.meetings),
                  standby_calls.comm, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }
}

/* Whether every process of the world (all but the waiting standbys) is
 * known to have died; acknowledges the failures, so that the standby's
 * receive from any source goes on. */
static int world_gone(void) {
  MPI_Group failed_group, all;
  if (MPIX_Comm_get_failed(standby_calls.comm, &failed_group) != MPI_SUCCESS) return 0;
  int count = 0, acked = 0, live_members = 0;
  MPI_Group_size(failed_group, &count);
  MPIX_Comm_ack_failed(standby_calls.comm, count, &acked);
  MPI_Comm_group(standby_calls.comm, &all);
  for (int process = 0; process < standby_calls.size; ++process) {
    if (standby_calls.waiting[process]) continue;
    int in_failed = MPI_UNDEFINED;
    MPI_Group_translate_ranks(all, 1, &process, failed_group, &in_failed);
    if (in_failed == MPI_UNDEFINED) ++live_members;
  }
  MPI_Group_free(&failed_group);
  MPI_Group_free(&all);
  return live_members == 0;
}

/* A standby's wait for the next meeting's call: 0 when called, 1 when no
 * process of the world is left, -1 with message written on MPI's error. */
static int await_call(char *message, size_t message_size) {
  char text[MPI_MAX_ERROR_STRING];
  for (;;) {
    MPI_Request request;
    MPI_Status status;
    int rc = MPI_Irecv(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, standby_calls.comm,
                       &request);
    for (double pause = 1e-4; rc == MPI_SUCCESS;) {
      int done = 0, error_class = 0;
      rc = MPI_Test(&request, &done, &status);
      if (rc != MPI_SUCCESS) {
        MPI_Error_class(rc, &error_class);
        if (!process_failed(error_class)) break;
        if (world_gone()) {
          MPI_Cancel(&request);
          MPI_Request_free(&request);
          return 1;
        }
        rc = MPI_SUCCESS; /* a death acknowledged: the receive is still posted */
      } else if (done) {
        break;
      }
      htp__sleep(pause); /* a standby waits for the whole run: it sleeps, not spins */
      if (pause < 5e-3) pause *= 2;
    }
    if (rc != MPI_SUCCESS) {
      snprintf(message, message_size, "waiting for a call: %.160s", mpi_message(rc, text));
      return -1;
    }
    if (status.MPI_TAG == call_tag(standby_calls.meetings)) return 0;
    /* else a second call to a meeting already held: dropped */
  }
}
#endif

static htp_result mpi_world_init(htp_world *world, char *message, size_t message_size) {
  int initialized = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    snprintf(message, message_size, "htp_world_create: MPI was already finalized");
    return HTP_ERR_SYSTEM;
  }
  mpi_world *state = calloc(1, sizeof *state);
  if (!state) return HTP_ERR_NOMEM;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      snprintf(message, message_size, "htp_world_create: MPI_Init_thread failed");
      free(state);
      return HTP_ERR_SYSTEM;
    }
    state->owns_mpi = 1;
  }
  int size = 0, process = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &process);
  const int standbys = world->config.standbys, actives = size - standbys;
  htp_result rc = HTP_OK;
  if (standbys >= size) {
    snprintf(message, message_size, "htp_world_create: %d standby processes of MPI's %d leave "
             "the world no rank", standbys, size);
    rc = HTP_ERR_INVALID;
  } else if (actives > HTP_WORLD_MAX_SIZE) {
    snprintf(message, message_size, "htp_world_create: MPI's %d ranks are more than a world "
             "takes (HTP_WORLD_MAX_SIZE %d)", actives, HTP_WORLD_MAX_SIZE);
    rc = HTP_ERR_INVALID;
  } else if (world->config.world_size != 0 && world->config.world_size != actives) {
    snprintf(message, message_size,
             "htp_world_create: world_size is %d but MPI has %d processes%s (use 0)",
             world->config.world_size, size, standbys ? ", less the standbys" : "");
    rc = HTP_ERR_INVALID;
  } else if (standbys > 0) {
#ifdef HTP_MPI_ULFM
    /* The standbys are the last processes; they wait for htp_world_grow. */
    MPI_Comm actives_comm;
    const int is_standby = process >= actives;
    if (standby_calls_init(size, actives, message, message_size)) {
      rc = HTP_ERR_SYSTEM;
    } else if (MPI_Comm_split(MPI_COMM_WORLD, is_standby, process, &actives_comm) != MPI_SUCCESS) {
      snprintf(message, message_size, "htp_world_create: MPI_Comm_split failed");
      rc = HTP_ERR_SYSTEM;
    } else if (is_standby) {
      MPI_Comm_free(&actives_comm);
      state->standby = 1;
      world->size = actives; /* the world it waits beside; it holds no rank */
      world->backend = state;
    } else {
      if (attach(world, state, actives_comm, message, message_size)) rc = HTP_ERR_SYSTEM;
      MPI_Comm_free(&actives_comm);
      /* MPI_Finalize meets every process of MPI_COMM_WORLD, and a standby
       * let go ends without it (or may be dead): never finalize here. */
      state->after_loss = 1;
    }
#else
    snprintf(message, message_size, "htp_world_create: standby processes need Open MPI's ULFM "
             "(this library's MPI has no MPIX_Comm_shrink)");
    rc = HTP_ERR_UNSUPPORTED;
#endif
  } else if (attach(world, state, MPI_COMM_WORLD, message, message_size)) {
    rc = HTP_ERR_SYSTEM;
  }
  if (rc != HTP_OK) {
    if (state->owns_mpi) MPI_Finalize();
    free(state);
  }
  return rc;
}

#ifdef HTP_MPI_ULFM
/* htp_world_shrink: the parent's communicators revoked (so that every
 * survivor still inside a call on them returns), its data communicator
 * shrunk to the live processes, the lost ranks told by comparing groups. */
static htp_result shrink_parent(htp_world *world, htp_world *parent_world, int32_t *lost,
                                int capacity, int *num_lost, char *message,
                                size_t message_size) {
  mpi_world *parent = state_of(parent_world);
  mpi_world *state = calloc(1, sizeof *state);
  if (!state) return HTP_ERR_NOMEM;
  MPIX_Comm_revoke(parent->comm);
  MPIX_Comm_revoke(parent->notice_comm);
  MPI_Comm live;
  char text[MPI_MAX_ERROR_STRING];
  int rc = MPIX_Comm_shrink(parent->comm, &live);
  if (rc != MPI_SUCCESS) {
    snprintf(message, message_size, "htp_world_shrink: MPIX_Comm_shrink failed: %s (was mpirun "
             "given --with-ft ulfm?)", mpi_message(rc, text));
    free(state);
    return HTP_ERR_SYSTEM;
  }
  MPI_Group before, after, gone;
  MPI_Comm_group(parent->comm, &before);
  MPI_Comm_group(live, &after);
  MPI_Group_difference(before, after, &gone);
  int count = 0;
  MPI_Group_size(gone, &count);
  for (int i = 0; i < count && i < capacity; ++i) {
    int old_rank = 0;
    MPI_Group_translate_ranks(gone, 1, &i, before, &old_rank);
    lost[i] = old_rank;
  }
  *num_lost = count;
  MPI_Group_free(&before);
  MPI_Group_free(&after);
  MPI_Group_free(&gone);
  const int attached = attach(world, state, live, message, message_size);
  MPI_Comm_free(&live);
  if (attached) {
    free(state);
    return HTP_ERR_SYSTEM;
  }
  world->config.world_size = 0; /* the size of MPI: the survivors */
  state->owns_mpi = parent->owns_mpi;
  state->after_loss = 1;
  parent->shrunk = 1;
  return HTP_OK;
}

static htp_result mpi_shrink_init(htp_world *world, htp_world *parent_world, int32_t *lost,
                                  int capacity, int *num_lost, char *message,
                                  size_t message_size) {
  fence_stop(state_of(parent_world)); /* a repair, watched below */
  watchdog dog;
  watchdog_start(&dog, "htp_world_shrink", parent_world->process_rank,
                 parent_world->config.timeout_s);
  const htp_result rc = shrink_parent(world, parent_world, lost, capacity, num_lost, message,
                                      message_size);
  watchdog_stop(&dog);
  return rc;
}

/* ----- Standbys ------------------------------------------------------------
 * A meeting of every live process of MPI_COMM_WORLD: the world's (active
 * >= 0, their rank) and the standbys' (-1). The lowest live rank says what
 * happens (its action and rank reach everyone); a JOIN gives the actives
 * and the first live standby (by MPI_COMM_WORLD rank) one communicator,
 * ordered with the standby at `rank`. *said: the action, 0 when no active
 * process is left, -1 for a JOIN with no standby left.
 */
static int meet(int active, int action, int rank, int *said, int *joins, MPI_Comm *out,
                char *message, size_t message_size) {
  *out = MPI_COMM_NULL;
  *joins = 0;
  MPI_Comm all;
  char text[MPI_MAX_ERROR_STRING];
  if (active >= 0) call_standbys();
  int rc = MPIX_Comm_shrink(standby_calls.comm, &all);
  if (rc != MPI_SUCCESS) {
    snprintf(message, message_size, "meeting the standbys: MPIX_Comm_shrink failed: %.160s",
             mpi_message(rc, text));
    return -1;
  }
  MPI_Comm_set_errhandler(all, MPI_ERRORS_RETURN);
  int me = 0, process = 0;
  MPI_Comm_rank(all, &me);
  MPI_Comm_rank(MPI_COMM_WORLD, &process);
  /* The lead: the lowest live rank of the world (rank 0 may be dead). */
  int mine[2] = {active >= 0 ? active : INT_MAX, active < 0 ? process : INT_MAX}, least[2];
  int control[2] = {action, rank};
  rc = MPI_Allreduce(mine, least, 2, MPI_INT, MPI_MIN, all);
  if (rc == MPI_SUCCESS && least[0] == INT_MAX) {
    control[0] = 0; /* only standbys met */
  } else if (rc == MPI_SUCCESS) {
    int lead_in = active == least[0] ? me : INT_MAX, lead = 0;
    rc = MPI_Allreduce(&lead_in, &lead, 1, MPI_INT, MPI_MIN, all);
    if (rc == MPI_SUCCESS) rc = MPI_Bcast(control, 2, MPI_INT, lead, all);
  }
  if (rc == MPI_SUCCESS && control[0] == MEET_JOIN && least[1] == INT_MAX) control[0] = -1;
  if (rc == MPI_SUCCESS && control[0] == MEET_JOIN) {
    *joins = active < 0 && process == least[1];
    standby_calls.waiting[least[1]] = 0;
    const int color = active >= 0 || *joins ? 0 : MPI_UNDEFINED;
    const int key = active < 0 ? control[1] : active < control[1] ? active : active + 1;
    rc = MPI_Comm_split(all, color, key, out);
  }
  MPI_Comm_free(&all);
  if (rc != MPI_SUCCESS) {
    snprintf(message, message_size, "meeting the standbys: %.160s", mpi_message(rc, text));
    return -1;
  }
  ++standby_calls.meetings;
  *said = control[0];
  return 0;
}

/* htp__world_adopt's maker: a world over the communicator *arg. */
static htp_result adopt_comm(htp_world *world, void *arg, char *message, size_t message_size) {
  mpi_world *state = calloc(1, sizeof *state);
  if (!state) return HTP_ERR_NOMEM;
  if (attach(world, state, *(MPI_Comm *)arg, message, message_size)) {
    free(state);
    return HTP_ERR_SYSTEM;
  }
  world->config.world_size = 0;
  world->config.standbys = 0;
  state->after_loss = 1; /* MPI_COMM_WORLD may hold dead processes: never finalize */
  return HTP_OK;
}

static htp_result grown_world(htp_world *like, MPI_Comm *comm, htp_world **out) {
  char message[HTP__MESSAGE_SIZE] = "";
  htp_result rc = htp__world_adopt(like, adopt_comm, comm, out, message, sizeof message);
  MPI_Comm_free(comm);
  if (rc != HTP_OK) htp__world_message(like, "%s", message);
  return rc;
}
#else
/* Without ULFM htp_world_create refuses config.fence: a world's waits are
 * still counted, nothing watches them. */
static int fence_start(htp_world *world, char *message, size_t message_size) {
  (void)message, (void)message_size;
  mpi_world *state = state_of(world);
  atomic_init(&state->waiting, 0);
  atomic_init(&state->idle_since, 0.0);
  return 0;
}
static void fence_stop(mpi_world *state) { (void)state; }
static void mpi_fence_rest(htp_world *world) { (void)world; }
#endif

static int mpi_is_standby(const htp_world *world) {
  return world->backend && state_of((htp_world *)world)->standby;
}

static htp_result mpi_standby_wait(htp_world *world, htp_world **joined) {
  if (!joined || !mpi_is_standby(world)) {
    htp__world_message(world, "htp_world_standby_wait: not a standby's world");
    return HTP_ERR_INVALID;
  }
  *joined = NULL;
#ifdef HTP_MPI_ULFM
  for (;;) {
    char message[HTP__MESSAGE_SIZE] = "";
    int said = 0, joins = 0;
    MPI_Comm comm;
    const int called = await_call(message, sizeof message);
    if (called < 0) {
      htp__world_message(world, "htp_world_standby_wait: %s", message);
      return HTP_ERR_SYSTEM;
    }
    if (called > 0) {
      htp__world_message(world, "htp_world_standby_wait: no process of the world is left");
      return HTP_ERR_REMOTE;
    }
    watchdog dog;
    watchdog_start(&dog, "htp_world_standby_wait's meeting", -1, world->config.timeout_s);
    htp_result rc = HTP_OK;
    if (meet(-1, 0, 0, &said, &joins, &comm, message, sizeof message)) {
      htp__world_message(world, "htp_world_standby_wait: %s", message);
      rc = HTP_ERR_SYSTEM;
    } else if (said == 0) {
      htp__world_message(world, "htp_world_standby_wait: no process of the world is left");
      rc = HTP_ERR_REMOTE;
    } else if (joins) {
      rc = grown_world(world, &comm, joined);
      if (rc == HTP_OK) {
        mpi_world *state = state_of(*joined), *old = state_of(world);
        state->owns_mpi = old->owns_mpi; /* the grown world carries MPI on */
        old->owns_mpi = 0;
      }
    }
    watchdog_stop(&dog);
    if (rc != HTP_OK || said == MEET_RELEASE || joins) return rc;
  }
#else
  htp__world_message(world, "htp_world_standby_wait: needs Open MPI's ULFM");
  return HTP_ERR_UNSUPPORTED;
#endif
}

/* The actives' side of a meeting: grow (a JOIN at rank) or release. */
static htp_result actives_meet(htp_world *world, int action, int32_t rank, htp_world **grown,
                               const char *what) {
  if (mpi_is_standby(world) || world->process_rank < 0) {
    htp__world_message(world, "%s: a standby's world is not a world of mpi processes", what);
    return HTP_ERR_INVALID;
  }
#ifdef HTP_MPI_ULFM
  char message[HTP__MESSAGE_SIZE] = "";
  int said = 0, joins = 0;
  MPI_Comm comm;
  watchdog dog;
  watchdog_start(&dog, what, world->process_rank, world->config.timeout_s);
  wait_begins(state_of(world)); /* a meeting is a wait on the world (the fence) */
  htp_result rc = HTP_OK;
  if (meet(world->process_rank, action, rank, &said, &joins, &comm, message, sizeof message)) {
    htp__world_message(world, "%s: %s", what, message);
    rc = HTP_ERR_SYSTEM;
  } else if (action == MEET_JOIN && said != MEET_JOIN) {
    htp__world_message(world, "%s: no standby process is left", what);
    rc = HTP_ERR_REMOTE;
  } else if (action == MEET_JOIN) {
    rc = grown_world(world, &comm, grown);
    if (rc == HTP_OK) {
      state_of(*grown)->owns_mpi = state_of(world)->owns_mpi;
      state_of(world)->owns_mpi = 0;
    }
  }
  wait_ends(state_of(world));
  watchdog_stop(&dog);
  return rc;
#else
  (void)action, (void)rank, (void)grown;
  htp__world_message(world, "%s: needs Open MPI's ULFM", what);
  return HTP_ERR_UNSUPPORTED;
#endif
}

static htp_result mpi_grow(htp_world *world, int32_t rank, htp_world **grown) {
  if (!grown || rank < 0 || rank > world->size) {
    htp__world_message(world, "htp_world_grow: grown is NULL or rank %d is not in [0, %d]",
                       (int)rank, world->size);
    return HTP_ERR_INVALID;
  }
  *grown = NULL;
  return actives_meet(world, MEET_JOIN, rank, grown, "htp_world_grow");
}

static htp_result mpi_release_standbys(htp_world *world) {
  return actives_meet(world, MEET_RELEASE, 0, NULL, "htp_world_release_standbys");
}

static void mpi_world_destroy(htp_world *world) {
  mpi_world *state = state_of(world);
  if (!state) return;
  if (state->standby) { /* nothing to meet, and MPI goes on in its grown world (or ends
                         * unfinalized: MPI_COMM_WORLD may hold dead processes) */
    free(state);
    world->backend = NULL;
    return;
  }
  fence_stop(state); /* destroy's meeting below has its own deadline */
  /* Every process meets here (or the deadline passes) before anything
   * collective is torn down: after a failure the processes may disagree on
   * whether the world failed, so destroy always meets, healthy or not. */
  int everyone_came = 0;
  MPI_Request request;
  if (state->shrunk) {
    everyone_came = 1; /* the survivors met in the shrink; the dead never come */
  } else if (MPI_Ibarrier(state->notice_comm, &request) == MPI_SUCCESS) {
    double deadline = htp_now() + world->config.timeout_s;
    for (int round = 0; htp_now() < deadline; ++round) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) {
        everyone_came = 1;
        break;
      }
      if (round < 64) sched_yield();
      else htp__sleep(1e-3);
    }
  }
  if (!everyone_came && state->owns_mpi) {
    fprintf(stderr, "htp: rank %d: a peer never reached htp_world_destroy of the failed world; "
                    "calling MPI_Abort\n",
            world->process_rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (state->notice_request != MPI_REQUEST_NULL) {
    MPI_Cancel(&state->notice_request);
    if (state->shrunk) MPI_Request_free(&state->notice_request); /* revoked: may never complete */
    else MPI_Wait(&state->notice_request, MPI_STATUS_IGNORE);
  }
  int sends_pending = 0;
  for (int peer = 0; peer < world->size; ++peer) {
    if (state->notice_sends[peer] == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Test(&state->notice_sends[peer], &done, MPI_STATUS_IGNORE);
    if (!done) sends_pending = 1;
  }
  int owns_mpi = state->owns_mpi && !state->shrunk; /* else the shrunk world owns MPI */
  MPI_Comm_free(&state->comm);
  MPI_Comm_free(&state->notice_comm);
  /* With dead processes in MPI_COMM_WORLD, Open MPI 5's MPI_Finalize can
   * wait for them for ever (its PMIx fence; open-mpi/ompi #11404): a world
   * made after a loss leaves MPI unfinalized, which mpirun --with-ft ulfm
   * accepts at exit. */
  int finalized = owns_mpi && everyone_came && !state->after_loss;
  if (finalized) MPI_Finalize();
  /* After MPI_Finalize nothing can write the buffers; without it, a pending
   * operation still might, so they are left allocated. */
  if (finalized || (state->abandoned_count == 0 && !sends_pending)) {
    for (int i = 0; i < state->abandoned_count; ++i) free(state->abandoned[i]);
    free(state->abandoned);
    free(state->staging);
    free(state->notice_sends);
    free(state);
  }
  world->backend = NULL;
}

/* ===== Collectives ====================================================== */

static void *staging(htp_ctx *ctx, size_t bytes) {
  mpi_world *state = state_of(ctx->world);
  if (bytes <= state->staging_size && state->staging) return state->staging;
  void *buffer = malloc(bytes ? bytes : 1);
  if (!buffer) return NULL;
  free(state->staging);
  state->staging = buffer;
  state->staging_size = bytes;
  return buffer;
}

/* Waits for a collective on the staging buffer; a failure abandons it. */
static htp_result wait_collective(htp_ctx *ctx, MPI_Request *request, double deadline,
                                  const char *what) {
  htp_result rc = wait_request(ctx, request, NULL, deadline, what);
  if (rc != HTP_OK) {
    mpi_world *state = state_of(ctx->world);
    void **abandoned =
        realloc(state->abandoned, (size_t)(state->abandoned_count + 1) * sizeof *abandoned);
    if (abandoned) { /* else leaked: still never reused */
      state->abandoned = abandoned;
      state->abandoned[state->abandoned_count++] = state->staging;
    }
    state->staging = NULL;
    state->staging_size = 0;
  }
  return rc;
}

enum { MAX_CHUNK = INT_MAX / 8 };

/* Sums count floats of the staging buffer over the world, in chunks. */
static htp_result sum_staged(htp_ctx *ctx, float *buffer, size_t count, double deadline,
                             const char *what) {
  size_t done = 0;
  do {
    size_t n = count - done < MAX_CHUNK ? count - done : MAX_CHUNK;
    MPI_Request request;
    MPI_CALL(ctx, MPI_Iallreduce(MPI_IN_PLACE, buffer + done, (int)n, MPI_FLOAT, MPI_SUM,
                                 state_of(ctx->world)->comm, &request));
    htp_result rc = wait_collective(ctx, &request, deadline, what);
    if (rc != HTP_OK) return rc;
    done += n;
  } while (done < count);
  return HTP_OK;
}

/* bf16 travels as f32 (MPI has no bf16 sum): widened into the staging
 * buffer, summed as MPI_FLOAT, rounded once into recv. */
static htp_result mpi_allreduce(htp_ctx *ctx, htp__elem elem, const void *send, void *recv,
                                size_t count, double deadline) {
  mpi_world *state = state_of(ctx->world);
  const char *what = htp__allreduce_name(elem);
  float *buffer = staging(ctx, count * sizeof(float));
  if (!buffer) return htp__fail(ctx, HTP_ERR_NOMEM, "%s: out of memory", what);
  /* bf16 on a device: its bits come to the host first (the tensor is
   * device memory there), then widen. */
  const int on_device = htp__space_on_device(ctx, HTP__SPACE_DEVICE);
  htp_bf16 *bits = NULL;
  if (elem == HTP__ELEM_BF16 && on_device) {
    bits = malloc(count ? count * sizeof *bits : 1);
    if (!bits) return htp__fail(ctx, HTP_ERR_NOMEM, "%s: out of memory", what);
    htp_result rc = htp__space_to_host(ctx, HTP__SPACE_DEVICE, bits, send, count * sizeof *bits,
                                       what);
    if (rc != HTP_OK) {
      free(bits);
      return rc;
    }
    send = bits;
  }
  if (elem == HTP__ELEM_BF16) {
    htp_bf16_to_f32_n(send, buffer, (int64_t)count);
  } else {
    (void)state;
    htp_result rc = htp__space_to_host(ctx, HTP__SPACE_DEVICE, buffer, send,
                                       count * sizeof(float), what);
    if (rc != HTP_OK) return rc;
  }
  htp_result summed = sum_staged(ctx, buffer, count, deadline, what);
  if (summed != HTP_OK) {
    free(bits);
    return summed;
  }
  if (elem == HTP__ELEM_BF16) {
    htp_bf16_from_f32_n(buffer, bits ? bits : recv, (int64_t)count);
    htp_result rc = bits ? htp__space_from_host(ctx, HTP__SPACE_DEVICE, recv, bits,
                                                count * sizeof *bits, what)
                         : HTP_OK;
    free(bits);
    return rc;
  }
  return htp__space_from_host(ctx, HTP__SPACE_DEVICE, recv, buffer, count * sizeof(float), what);
}

static htp_result mpi_allgather(htp_ctx *ctx, htp__space space, const void *send, void *recv,
                                size_t bytes, double deadline) {
  mpi_world *state = state_of(ctx->world);
  size_t total = bytes * (size_t)ctx->world->size;
  if (bytes > (size_t)MAX_CHUNK)
    return htp__fail(ctx, HTP_ERR_UNSUPPORTED,
                     "htp_allgather: %zu bytes per rank is more than the mpi backend's %d",
                     bytes, MAX_CHUNK);
  char *buffer = staging(ctx, total);
  if (!buffer) return htp__fail(ctx, HTP_ERR_NOMEM, "htp_allgather: out of memory");
  htp_result rc = htp__space_to_host(ctx, space, buffer + (size_t)ctx->rank * bytes, send, bytes,
                                     "htp_allgather");
  if (rc != HTP_OK) return rc;
  MPI_Request request;
  MPI_CALL(ctx, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, (int)bytes, MPI_BYTE,
                               state->comm, &request));
  rc = wait_collective(ctx, &request, deadline, "htp_allgather");
  if (rc != HTP_OK) return rc;
  return htp__space_from_host(ctx, space, recv, buffer, total, "htp_allgather");
}

static htp_result mpi_broadcast(htp_ctx *ctx, htp__space space, void *user_buffer, size_t bytes,
                                int root, double deadline) {
  mpi_world *state = state_of(ctx->world);
  char *buffer = staging(ctx, bytes);
  if (!buffer) return htp__fail(ctx, HTP_ERR_NOMEM, "htp_broadcast: out of memory");
  if (ctx->rank == root) {
    htp_result rc = htp__space_to_host(ctx, space, buffer, user_buffer, bytes, "htp_broadcast");
    if (rc != HTP_OK) return rc;
  }
  size_t done = 0;
  do {
    size_t n = bytes - done < MAX_CHUNK ? bytes - done : MAX_CHUNK;
    MPI_Request request;
    MPI_CALL(ctx, MPI_Ibcast(buffer + done, (int)n, MPI_BYTE, root, state->comm, &request));
    htp_result rc = wait_collective(ctx, &request, deadline, "htp_broadcast");
    if (rc != HTP_OK) return rc;
    done += n;
  } while (done < bytes);
  if (ctx->rank != root)
    return htp__space_from_host(ctx, space, user_buffer, buffer, bytes, "htp_broadcast");
  return HTP_OK;
}

static htp_result mpi_barrier(htp_ctx *ctx, double deadline) {
  MPI_Request request;
  MPI_CALL(ctx, MPI_Ibarrier(state_of(ctx->world)->comm, &request));
  return wait_request(ctx, &request, NULL, deadline, "htp_barrier");
}

/* Every rank's call, gathered and compared before the data moves: MPI
 * matches collectives by order alone, so unlike calls would hang, fail in
 * MPI, or sum unlike buffers without a word. */
enum { AGREE_WORDS = 7 };

/* One rank's call from its AGREE_WORDS gathered words (mpi_agree's order). */
static htp__collective_args unpack_args(const long long *w) {
  const uint32_t bits = (uint32_t)w[6];
  htp__collective_args args = {(htp__collective)w[0], (size_t)w[1], (size_t)w[2], (int)w[3],
                               (htp__space)w[4],      (unsigned)w[5], 0.0f};
  memcpy(&args.epsilon, &bits, sizeof bits);
  return args;
}

static htp_result mpi_agree(htp_ctx *ctx, const htp__collective_args *args, double deadline) {
  const char *what = htp__collective_name(args->op);
  const int size = ctx->world->size;
  uint32_t epsilon_bits;
  memcpy(&epsilon_bits, &args->epsilon, sizeof epsilon_bits);
  const long long mine[AGREE_WORDS] = {args->op,    (long long)args->count, (long long)args->cols,
                                       args->root,  args->space,            args->parts,
                                       epsilon_bits};
  long long *all = staging(ctx, (size_t)size * sizeof mine);
  if (!all) return htp__fail(ctx, HTP_ERR_NOMEM, "%s: out of memory", what);
  memcpy(all + (size_t)ctx->rank * AGREE_WORDS, mine, sizeof mine);
  MPI_Request request;
  MPI_CALL(ctx, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, AGREE_WORDS,
                               MPI_LONG_LONG, state_of(ctx->world)->comm, &request));
  htp_result rc = wait_collective(ctx, &request, deadline, what);
  if (rc != HTP_OK) return rc;
  const htp__collective_args first = unpack_args(all);
  for (int rank = 1; rank < size; ++rank) {
    const htp__collective_args other = unpack_args(all + (size_t)rank * AGREE_WORDS);
    char message[HTP__MESSAGE_SIZE];
    if (htp__collective_mismatch(&first, rank, &other, message, sizeof message)) {
      htp__world_fail_alike(ctx->world, ctx, HTP_ERR_INVALID, "%s", message);
      return htp__ctx_error(ctx, HTP_ERR_INVALID, "%s", message);
    }
  }
  return HTP_OK;
}

/* ===== Point to point =================================================== */

/* After a failed wait: a cancelled request no longer touches the buffer. */
static void cancel_request(MPI_Request *request) {
  if (*request == MPI_REQUEST_NULL) return;
  MPI_Cancel(request);
  int done = 0;
  for (int round = 0; round < 1000 && !done; ++round) {
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (!done) htp__sleep(1e-4);
  }
}

static htp_result check_tag(htp_ctx *ctx, int tag, const char *what) {
  int upper = state_of(ctx->world)->tag_upper_bound;
  if (tag > upper)
    return htp__fail(ctx, HTP_ERR_INVALID, "%s: tag %d is above MPI_TAG_UB (%d)", what, tag,
                     upper);
  return HTP_OK;
}

/* Issend: completes when the receive has matched, as htp_send promises. */
static htp_result send_host(htp_ctx *ctx, const void *buffer, size_t bytes, int peer, int tag,
                            double deadline) {
  htp_result rc = check_tag(ctx, tag, "htp_send");
  if (rc != HTP_OK) return rc;
  if (bytes > (size_t)INT_MAX)
    return htp__fail(ctx, HTP_ERR_UNSUPPORTED, "htp_send: %zu bytes is more than INT_MAX", bytes);
  MPI_Request request;
  MPI_CALL(ctx, MPI_Issend(buffer, (int)bytes, MPI_BYTE, peer, tag, state_of(ctx->world)->comm,
                           &request));
  rc = wait_request(ctx, &request, NULL, deadline, "htp_send");
  if (rc != HTP_OK) cancel_request(&request);
  return rc;
}

static htp_result recv_host(htp_ctx *ctx, void *buffer, size_t bytes, int peer, int tag,
                            double deadline) {
  htp_result rc = check_tag(ctx, tag, "htp_recv");
  if (rc != HTP_OK) return rc;
  if (bytes > (size_t)INT_MAX)
    return htp__fail(ctx, HTP_ERR_UNSUPPORTED, "htp_recv: %zu bytes is more than INT_MAX", bytes);
  MPI_Request request;
  MPI_Status status;
  MPI_CALL(ctx, MPI_Irecv(buffer, (int)bytes, MPI_BYTE, peer, tag, state_of(ctx->world)->comm,
                          &request));
  rc = wait_request(ctx, &request, &status, deadline, "htp_recv");
  if (rc != HTP_OK) {
    cancel_request(&request);
    return rc;
  }
  int received = 0;
  MPI_Get_count(&status, MPI_BYTE, &received);
  if ((size_t)received != bytes)
    return htp__fail(ctx, HTP_ERR_INVALID, "htp_recv: rank %d sent %d bytes with tag %d, not %zu",
                     peer, received, tag, bytes);
  return HTP_OK;
}

/* A device's memory travels through a host copy (MPI here is not
 * CUDA-aware): downloaded before the send, uploaded after the receive. */
static htp_result mpi_send(htp_ctx *ctx, htp__space space, const void *buffer, size_t bytes,
                           int peer, int tag, double deadline) {
  if (!htp__space_on_device(ctx, space) || !bytes)
    return send_host(ctx, buffer, bytes, peer, tag, deadline);
  void *host = malloc(bytes);
  if (!host) return htp__fail(ctx, HTP_ERR_NOMEM, "htp_send: out of memory for %zu bytes", bytes);
  htp_result rc = htp__space_to_host(ctx, space, host, buffer, bytes, "htp_send");
  if (rc == HTP_OK) rc = send_host(ctx, host, bytes, peer, tag, deadline);
  free(host);
  return rc;
}

static htp_result mpi_recv(htp_ctx *ctx, htp__space space, void *buffer, size_t bytes, int peer,
                           int tag, double deadline) {
  if (!htp__space_on_device(ctx, space) || !bytes)
    return recv_host(ctx, buffer, bytes, peer, tag, deadline);
  void *host = malloc(bytes);
  if (!host) return htp__fail(ctx, HTP_ERR_NOMEM, "htp_recv: out of memory for %zu bytes", bytes);
  htp_result rc = recv_host(ctx, host, bytes, peer, tag, deadline);
  if (rc == HTP_OK) rc = htp__space_from_host(ctx, space, buffer, host, bytes, "htp_recv");
  free(host);
  return rc;
}

/* ===== Faults =========================================================== */

static htp_result mpi_wait_failure(htp_ctx *ctx, double deadline) {
  htp_world *world = ctx->world;
  while (!failed(world) && htp_now() < deadline) {
    poll_notice(world, ctx);
    double left = deadline - htp_now();
    htp__sleep(left < 1e-3 ? left : 1e-3);
  }
  return htp__world_failure_for(world, ctx->rank);
}

const htp__backend_ops htp__mpi_ops = {
    .name = "mpi",
    .world_init = mpi_world_init,
    .world_destroy = mpi_world_destroy,
    .ctx_init = NULL,
    .ctx_destroy = NULL,
    .allreduce_sum = mpi_allreduce,
    .allgather = mpi_allgather,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .agree = mpi_agree,
    .notify_failure = mpi_notify_failure,
    .wait_failure = mpi_wait_failure,
#ifdef HTP_MPI_ULFM
    .shrink_init = mpi_shrink_init,
#endif
    .is_standby = mpi_is_standby,
    .standby_wait = mpi_standby_wait,
    .grow = mpi_grow,
    .release_standbys = mpi_release_standbys,
    .fence_rest = mpi_fence_rest,
};
