/*===- runtime/comm_local.c - the local backend: ranks are threads --------===*
 *
 * Every rank is a thread of this process and they share one htp_world. All
 * waits go through one mutex and one condition variable that runs on
 * CLOCK_MONOTONIC, each wait with the call's deadline; a failure of the world
 * broadcasts the condition so that every waiter (including a rank hung by
 * fault injection) wakes up.
 *
 * A collective is two rendezvous: each rank publishes its arguments and
 * arrives (the last arrival checks that they agree), then every rank works
 * straight on the others' buffers, then a second rendezvous says every rank
 * is done with them. The all-reduce splits the output into one chunk per
 * rank; each rank sums its chunk of every part in rank order 0..size-1 into
 * its own recv, through its kernel table (so the parts may be device memory
 * of one GPU), and copies the sum into every other rank's recv. Each
 * element is thus the same left-to-right sum whatever the chunking, so
 * results are bitwise reproducible and equal on every rank, and recv ==
 * send works (the sum is elementwise, and a rank's chunk of each part is
 * read only by the rank that sums it).
 *
 * send/recv is a rendezvous with no copy in between: send queues a message
 * that points at its buffer in the receiver's inbox and waits; recv takes the
 * first message of that peer and tag, copies it outside the lock, and marks
 * it done. The all-gather, broadcast and send/recv move host memory with
 * memcpy and a device's (the ranks share it) with the table's copy, as the
 * call's memory space says (comm_internal.h, htp__space).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "runtime/comm_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct local_slot {
  htp__collective_args args;
  const void *send;
  void *recv;
  void *normed; /* an all-reduce with a norm: where its rows go, else NULL */
} local_slot;

enum { MSG_POSTED = 0, MSG_CLAIMED = 1, MSG_DONE = 2 };

typedef struct local_message {
  struct local_message *next;
  int source, tag, state;
  htp__space space;
  const void *buffer;
  size_t bytes;
  htp_result status;
} local_message;

typedef struct local_world {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  int size;
  int arrived;
  unsigned long long generation;
  /* Verdict of the last rendezvous that checked arguments (set by the last
   * arrival, read by each rank before it can arrive again). */
  int mismatch;
  char mismatch_message[HTP__MESSAGE_SIZE];
  local_slot *slots;       /* [size] */
  local_message **inboxes; /* [size]: FIFO of messages to that rank */
} local_world;

static local_world *state_of(htp_world *world) { return (local_world *)world->backend; }

static int failed(htp_world *world) { return atomic_load(&world->fail_code) != HTP_OK; }

/* ===== World ============================================================= */

static htp_result local_world_init(htp_world *world, char *message, size_t message_size) {
  (void)message, (void)message_size;
  local_world *state = calloc(1, sizeof *state);
  if (!state) return HTP_ERR_NOMEM;
  int size = world->config.world_size;
  state->size = size;
  state->slots = calloc((size_t)size, sizeof *state->slots);
  state->inboxes = calloc((size_t)size, sizeof *state->inboxes);
  pthread_condattr_t attributes;
  int ok = state->slots && state->inboxes;
  if (ok && pthread_condattr_init(&attributes) == 0) {
    ok = pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC) == 0 &&
         pthread_cond_init(&state->wake, &attributes) == 0;
    pthread_condattr_destroy(&attributes);
    if (ok && pthread_mutex_init(&state->lock, NULL) != 0) {
      pthread_cond_destroy(&state->wake);
      ok = 0;
    }
  } else {
    ok = 0;
  }
  if (!ok) {
    free(state->slots);
    free(state->inboxes);
    free(state);
    return HTP_ERR_NOMEM;
  }
  world->size = size;
  world->process_rank = -1;
  world->backend = state;
  return HTP_OK;
}

static void local_world_destroy(htp_world *world) {
  local_world *state = state_of(world);
  if (!state) return;
  pthread_cond_destroy(&state->wake);
  pthread_mutex_destroy(&state->lock);
  free(state->slots);
  free(state->inboxes);
  free(state);
  world->backend = NULL;
}

static void local_notify_failure(htp_world *world, htp_ctx *ctx) {
  (void)ctx;
  local_world *state = state_of(world);
  pthread_mutex_lock(&state->lock);
  pthread_cond_broadcast(&state->wake);
  pthread_mutex_unlock(&state->lock);
}

/* Waits on the world's condition until the deadline; the lock is held.
 * Returns 0 when woken (maybe spuriously), ETIMEDOUT at the deadline. */
static int wait_until(local_world *state, double deadline) {
  struct timespec when = htp__timespec(deadline);
  return pthread_cond_timedwait(&state->wake, &state->lock, &when);
}

/* ===== Rendezvous ======================================================= */

static void check_slots(local_world *state) {
  state->mismatch = 0;
  for (int rank = 1; rank < state->size && !state->mismatch; ++rank)
    state->mismatch = htp__collective_mismatch(&state->slots[0].args, rank,
                                               &state->slots[rank].args, state->mismatch_message,
                                               HTP__MESSAGE_SIZE);
}

/* Arrives at the world's barrier and waits for every rank. With check set,
 * the last arrival compares the published slots. */
static htp_result rendezvous(htp_ctx *ctx, double deadline, int check, const char *what) {
  local_world *state = state_of(ctx->world);
  pthread_mutex_lock(&state->lock);
  if (failed(ctx->world)) {
    pthread_mutex_unlock(&state->lock);
    return htp__check_failed(ctx, what);
  }
  unsigned long long generation = state->generation;
  if (++state->arrived == state->size) {
    if (check) check_slots(state);
    state->arrived = 0;
    state->generation++;
    pthread_cond_broadcast(&state->wake);
  } else {
    while (state->generation == generation && !failed(ctx->world)) {
      if (wait_until(state, deadline) == ETIMEDOUT && state->generation == generation &&
          !failed(ctx->world)) {
        pthread_mutex_unlock(&state->lock);
        return htp__fail(ctx, HTP_ERR_TIMEOUT, "%s: rank %d waited %.3g s for its peers",
                         what, ctx->rank, ctx->world->config.timeout_s);
      }
    }
    if (state->generation == generation) { /* failed while waiting */
      pthread_mutex_unlock(&state->lock);
      return htp__check_failed(ctx, what);
    }
  }
  if (check && state->mismatch) {
    char message[HTP__MESSAGE_SIZE];
    memcpy(message, state->mismatch_message, sizeof message);
    pthread_mutex_unlock(&state->lock);
    htp__world_fail(ctx->world, ctx, HTP_ERR_INVALID, -1, "%s", message);
    return htp__ctx_error(ctx, HTP_ERR_INVALID, "%s", message);
  }
  pthread_mutex_unlock(&state->lock);
  return HTP_OK;
}

static htp_result publish_rows(htp_ctx *ctx, htp__collective op, htp__space space, size_t count,
                               size_t cols, int root, const void *send, void *recv,
                               const htp__epilogue *epilogue, double deadline) {
  local_world *state = state_of(ctx->world);
  local_slot *slot = &state->slots[ctx->rank];
  slot->args = htp__collective_args_of(op, space, count, cols, root, epilogue);
  slot->normed = epilogue ? epilogue->normed : NULL;
  slot->send = send;
  slot->recv = recv;
  return rendezvous(ctx, deadline, 1, htp__collective_name(op));
}

static htp_result publish(htp_ctx *ctx, htp__collective op, htp__space space, size_t count, int root,
                          const void *send, void *recv, double deadline) {
  return publish_rows(ctx, op, space, count, 0, root, send, recv, NULL, deadline);
}

/* ===== Collectives ====================================================== */

enum { ALIGN_ELEMENTS = 32 }; /* 128 bytes of f32, 64 of bf16 */

void htp__allreduce_chunk(size_t count, int size, const int32_t *sm_counts, int device_sms,
                          int rank, size_t align, size_t *begin, size_t *end) {
  /* A rank weighs its partition's SMs; a rank on the whole GPU (0) an equal
   * share of the SMs no partition holds (on an H200, --sms 0:8 at tp 4: 8
   * against three ranks of 41, not an equal quarter). */
  int64_t named = 0, unnamed = 0;
  for (int r = 0; sm_counts && r < size; ++r) {
    if (sm_counts[r] > 0) named += sm_counts[r];
    else unnamed++;
  }
  const int64_t rest = (int64_t)device_sms - named;
  const int64_t share = unnamed && rest >= unnamed ? rest / unnamed : 0;
  int64_t total = 0, before = 0, mine = 0;
  for (int r = 0; named && r < size; ++r) {
    const int64_t w = sm_counts[r] > 0 ? sm_counts[r] : share;
    if (w <= 0) { /* no proportion to keep */
      total = 0;
      break;
    }
    if (r < rank) before += w;
    if (r == rank) mine = w;
    total += w;
  }
  if (total == 0) {
    size_t chunk = (count + (size_t)size - 1) / (size_t)size;
    chunk = (chunk + align - 1) / align * align;
    *begin = chunk * (size_t)rank;
    *end = *begin + chunk < count ? *begin + chunk : count;
    if (*begin > count) *begin = count;
    return;
  }
  /* Where rank r's chunk starts: its SMs' share of the elements before
   * it, rounded up to whole lines (monotone, so the chunks tile). */
  const int64_t through = before + mine;
  size_t at = (size_t)((unsigned __int128)count * (uint64_t)before / (uint64_t)total);
  size_t next = rank + 1 == size
                    ? count
                    : (size_t)((unsigned __int128)count * (uint64_t)through / (uint64_t)total);
  at = (at + align - 1) / align * align;
  if (rank + 1 < size) next = (next + align - 1) / align * align;
  *begin = at < count ? at : count;
  *end = next < count ? next : count;
}

/* Ranks of a local world share one address space and one device, so each
 * rank sums its chunk of every rank's part with its kernel table's sum entry
 * (chunks in proportion to the ranks' SMs where they partition one GPU: a
 * rank on 8 of an H200's SMs sums a tenth beside three ranks on 24, not a
 * quarter, htp__allreduce_chunk)
 * (on the CPU host memory; on a GPU device memory the host cannot read, on
 * the rank's stream), runs the epilogue on it where there is one (the bias
 * and residual added, the norm taken: its chunk is then whole rows, and its
 * own replicated copies are the ones it uses), and copies the result (and
 * the norm's rows) into every other rank's recv (and normed) with
 * the table's copy, then waits for its stream before the closing
 * rendezvous. Before publishing, each rank waits for its own stream, so its
 * part is complete when the others read it. A group layer norm (the
 * epilogue's `replicated`) is the same without the sum: each rank
 * normalises its rows of its own copy of the input and copies them. */
enum { MAX_STACK_PARTS = 64 };

/* Bytes between two buffers of `space`: host memory with memcpy; a
 * device's (ranks of a local world share it) with the table's copy on the
 * caller's stream, which `settle` then waits for. */
static htp_kernel_status move(htp_ctx *ctx, htp__space space, void *dst, const void *src,
                              size_t bytes) {
  if (!bytes || dst == src) return HTP_KERNEL_OK;
  if (!htp__space_on_device(ctx, space)) {
    memcpy(dst, src, bytes);
    return HTP_KERNEL_OK;
  }
  return htp__kernel_table(ctx)->copy(htp__kernel_env(ctx), dst, src, bytes);
}

static htp_kernel_status settle(htp_ctx *ctx, htp__space space) {
  const htp_kernel_table *table = htp__kernel_table(ctx);
  if (!htp__space_on_device(ctx, space) || !table->synchronize) return HTP_KERNEL_OK;
  return table->synchronize(htp__kernel_env(ctx));
}

/* A kernel failure on ctx, reported once its stream has run what it
 * queued: a rank failing mid-way has copies queued that read and write its
 * peers' buffers, which the peers, woken by the failure, may reuse at once.
 * The wait may write the kernel error buffer: the failure's is kept. */
static htp_result fail_settled(htp_ctx *ctx, htp__space space, htp_kernel_status status,
                               const char *what) {
  char why[sizeof ctx->kernel_error];
  memcpy(why, ctx->kernel_error, sizeof why);
  (void)settle(ctx, space);
  memcpy(ctx->kernel_error, why, sizeof why);
  return htp__kernel_failed(ctx, status, what);
}

static htp_result local_allreduce_with(htp_ctx *ctx, htp__elem elem, const void *send,
                                       void *recv, size_t rows, size_t cols,
                                       const htp__epilogue *epilogue, double deadline) {
  const int norm = epilogue && epilogue->normed;
  const int summed = !(epilogue && epilogue->replicated);
  const char *what = epilogue ? htp__epilogue_name(elem, epilogue) : htp__allreduce_name(elem);
  const htp_kernel_table *table = htp__kernel_table(ctx);
  const htp_kernel_env *env = htp__kernel_env(ctx);
  htp_kernel_status status = settle(ctx, HTP__SPACE_DEVICE);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, what);
  const int bf16 = elem == HTP__ELEM_BF16;
  const htp__collective op = htp__allreduce_collective(elem, epilogue);
  const size_t count = rows * cols;
  htp_result rc = publish_rows(ctx, op, HTP__SPACE_DEVICE, count, epilogue ? cols : 0, 0, send,
                               recv, epilogue, deadline);
  if (rc != HTP_OK) return rc;
  local_world *state = state_of(ctx->world);
  int size = state->size;
  /* With an epilogue the chunks are whole rows (the bias and the norm are
   * per row), still starting on whole lines of ALIGN_ELEMENTS. */
  size_t begin, end, unit = 1;
  while (epilogue && unit * cols % ALIGN_ELEMENTS) unit++;
  htp__allreduce_chunk(epilogue ? rows : count, size, ctx->world->sm_counts,
                       atomic_load(&ctx->world->device_sms), ctx->rank,
                       epilogue ? unit : ALIGN_ELEMENTS, &begin, &end);
  const size_t first_row = begin;
  if (epilogue) begin *= cols, end *= cols;
  const size_t elem_size = htp__elem_size(elem);
  if (begin < end) {
    const size_t offset = begin * elem_size, bytes = (end - begin) * elem_size;
    const int64_t n = (int64_t)(end - begin);
    /* The rows the epilogue reads: this rank's chunk of the sum in recv, or
     * of its own input, read in place (a group layer norm: no sum). */
    char *rows_at = summed ? (char *)recv : (char *)send;
    if (summed) {
      const char *stack_parts[MAX_STACK_PARTS];
      const char **parts =
          size <= MAX_STACK_PARTS ? stack_parts : malloc((size_t)size * sizeof *parts);
      if (!parts) status = HTP_KERNEL_ERR_NOMEM;
      for (int rank = 0; parts && rank < size; ++rank)
        parts[rank] = (const char *)state->slots[rank].send + offset;
      /* Rank order 0..size-1 for every element: bitwise reproducible and
       * the same on every rank, whatever the chunking. */
      if (status == HTP_KERNEL_OK)
        status = bf16 ? table->sum_bf16(env, (const htp_bf16 *const *)parts, size,
                                        (htp_bf16 *)(rows_at + offset), n)
                      : table->sum_f32(env, (const float *const *)parts, size,
                                       (float *)(rows_at + offset), n);
      if (parts != stack_parts) free(parts);
    }
    /* This rank's own copies of the bias, residual and norm weights (the
     * same on every rank) on its rows; a failure fails the world, which
     * wakes the others. */
    if (status == HTP_KERNEL_OK && epilogue) {
      rc = htp__epilogue_rows(ctx, elem, epilogue, rows_at, (int64_t)first_row,
                              n / (int64_t)cols, (int64_t)cols);
      if (rc != HTP_OK) { /* the world failed; its queued sum reads the peers' parts */
        (void)settle(ctx, HTP__SPACE_DEVICE);
        return rc;
      }
    }
    for (int rank = 0; status == HTP_KERNEL_OK && rank < size; ++rank) {
      if (rank == ctx->rank) continue;
      if (summed)
        status = table->copy(env, (char *)state->slots[rank].recv + offset, rows_at + offset,
                             bytes);
      if (status == HTP_KERNEL_OK && norm)
        status = table->copy(env, (char *)state->slots[rank].normed + offset,
                             (const char *)epilogue->normed + offset, bytes);
    }
    if (status == HTP_KERNEL_OK) status = settle(ctx, HTP__SPACE_DEVICE);
  }
  /* A failure fails the world, which wakes the others in the rendezvous. */
  if (status != HTP_KERNEL_OK) return fail_settled(ctx, HTP__SPACE_DEVICE, status, what);
  return rendezvous(ctx, deadline, 0, what);
}

static htp_result local_allreduce(htp_ctx *ctx, htp__elem elem, const void *send, void *recv,
                                  size_t count, double deadline) {
  return local_allreduce_with(ctx, elem, send, recv, 1, count, NULL, deadline);
}

static htp_result local_allreduce_epilogue(htp_ctx *ctx, htp__elem elem, const void *send,
                                           void *recv, int64_t rows, int64_t cols,
                                           const htp__epilogue *epilogue, double deadline) {
  return local_allreduce_with(ctx, elem, send, recv, (size_t)rows, (size_t)cols, epilogue,
                              deadline);
}

static htp_result local_allgather(htp_ctx *ctx, htp__space space, const void *send, void *recv,
                                  size_t bytes, double deadline) {
  htp_result rc = publish(ctx, HTP__OP_ALLGATHER, space, bytes, 0, send, recv, deadline);
  if (rc != HTP_OK) return rc;
  local_world *state = state_of(ctx->world);
  htp_kernel_status status = HTP_KERNEL_OK;
  for (int rank = 0; bytes > 0 && status == HTP_KERNEL_OK && rank < state->size; ++rank)
    status = move(ctx, space, (char *)recv + (size_t)rank * bytes, state->slots[rank].send, bytes);
  if (status == HTP_KERNEL_OK) status = settle(ctx, space);
  if (status != HTP_KERNEL_OK) return fail_settled(ctx, space, status, "htp_allgather");
  return rendezvous(ctx, deadline, 0, "htp_allgather");
}

static htp_result local_broadcast(htp_ctx *ctx, htp__space space, void *buffer, size_t bytes,
                                  int root, double deadline) {
  htp_result rc = publish(ctx, HTP__OP_BROADCAST, space, bytes, root, buffer, buffer, deadline);
  if (rc != HTP_OK) return rc;
  local_world *state = state_of(ctx->world);
  htp_kernel_status status = HTP_KERNEL_OK;
  if (ctx->rank != root) status = move(ctx, space, buffer, state->slots[root].send, bytes);
  if (status == HTP_KERNEL_OK) status = settle(ctx, space);
  if (status != HTP_KERNEL_OK) return fail_settled(ctx, space, status, "htp_broadcast");
  return rendezvous(ctx, deadline, 0, "htp_broadcast");
}

static htp_result local_barrier(htp_ctx *ctx, double deadline) {
  return publish(ctx, HTP__OP_BARRIER, HTP__SPACE_HOST, 0, 0, NULL, NULL, deadline);
}

/* ===== Point to point =================================================== */

static void unlink_message(local_message **inbox, local_message *message) {
  for (local_message **link = inbox; *link; link = &(*link)->next) {
    if (*link == message) {
      *link = message->next;
      return;
    }
  }
}

static htp_result local_send(htp_ctx *ctx, htp__space space, const void *buffer, size_t bytes,
                             int peer, int tag, double deadline) {
  local_world *state = state_of(ctx->world);
  local_message message = {NULL, ctx->rank, tag, MSG_POSTED, space, buffer, bytes, HTP_OK};
  pthread_mutex_lock(&state->lock);
  if (failed(ctx->world)) {
    pthread_mutex_unlock(&state->lock);
    return htp__check_failed(ctx, "htp_send");
  }
  local_message **tail = &state->inboxes[peer];
  while (*tail) tail = &(*tail)->next;
  *tail = &message;
  pthread_cond_broadcast(&state->wake);
  int timed_out = 0;
  while (message.state != MSG_DONE) {
    /* A claimed message is being copied by the receiver: that copy ends
     * whatever happens, and the buffer must outlive it. */
    if (message.state == MSG_POSTED && (failed(ctx->world) || timed_out)) break;
    if (wait_until(state, timed_out ? htp_now() + 0.001 : deadline) == ETIMEDOUT) timed_out = 1;
  }
  if (message.state == MSG_POSTED) unlink_message(&state->inboxes[peer], &message);
  pthread_mutex_unlock(&state->lock);
  if (message.state == MSG_DONE) {
    if (message.status == HTP_OK) return HTP_OK;
    if (message.bytes != bytes)
      return htp__ctx_error(ctx, message.status,
                            "htp_send: rank %d received %zu bytes with tag %d, not %zu", peer,
                            bytes, tag, message.bytes);
    return htp__ctx_error(ctx, message.status, "htp_send: rank %d could not take tag %d (%s)",
                          peer, tag, htp_strerror(message.status));
  }
  if (timed_out && !failed(ctx->world))
    return htp__fail(ctx, HTP_ERR_TIMEOUT,
                     "htp_send: rank %d did not receive tag %d from rank %d within %.3g s", peer,
                     tag, ctx->rank, ctx->world->config.timeout_s);
  return htp__check_failed(ctx, "htp_send");
}

static htp_result local_recv(htp_ctx *ctx, htp__space space, void *buffer, size_t bytes,
                             int peer, int tag, double deadline) {
  local_world *state = state_of(ctx->world);
  pthread_mutex_lock(&state->lock);
  local_message *found = NULL;
  for (;;) {
    if (failed(ctx->world)) {
      pthread_mutex_unlock(&state->lock);
      return htp__check_failed(ctx, "htp_recv");
    }
    for (local_message *message = state->inboxes[ctx->rank]; message; message = message->next)
      if (message->source == peer && message->tag == tag && message->state == MSG_POSTED) {
        found = message;
        break;
      }
    if (found) break;
    if (wait_until(state, deadline) == ETIMEDOUT) {
      pthread_mutex_unlock(&state->lock);
      return htp__fail(ctx, HTP_ERR_TIMEOUT,
                       "htp_recv: rank %d sent nothing with tag %d to rank %d within %.3g s",
                       peer, tag, ctx->rank, ctx->world->config.timeout_s);
    }
  }
  unlink_message(&state->inboxes[ctx->rank], found);
  if (found->space != space) {
    found->status = HTP_ERR_INVALID;
    found->state = MSG_DONE;
    pthread_cond_broadcast(&state->wake);
    pthread_mutex_unlock(&state->lock);
    htp__world_fail(ctx->world, ctx, HTP_ERR_INVALID, -1,
                    "send/recv space mismatch: rank %d sent %s memory, rank %d receives into "
                    "%s memory",
                    peer, found->space == HTP__SPACE_HOST ? "host" : "device", ctx->rank,
                    space == HTP__SPACE_HOST ? "host" : "device");
    return htp__ctx_error(ctx, HTP_ERR_INVALID,
                          "htp_recv: rank %d sent tag %d from the other memory space", peer, tag);
  }
  if (found->bytes != bytes) {
    size_t sent = found->bytes;
    found->status = HTP_ERR_INVALID;
    found->bytes = bytes; /* tells the sender what was expected */
    found->state = MSG_DONE;
    pthread_cond_broadcast(&state->wake);
    pthread_mutex_unlock(&state->lock);
    htp__world_fail(ctx->world, ctx, HTP_ERR_INVALID, -1,
                    "send/recv size mismatch: rank %d sent %zu bytes, rank %d expected %zu",
                    peer, sent, ctx->rank, bytes);
    return htp__ctx_error(ctx, HTP_ERR_INVALID,
                          "htp_recv: rank %d sent %zu bytes with tag %d, not %zu", peer, sent,
                          tag, bytes);
  }
  found->state = MSG_CLAIMED;
  pthread_mutex_unlock(&state->lock);
  /* The sender's stream was settled before it posted (ctx.c); the copy is
   * done before the sender may reuse its buffer. */
  htp_kernel_status status = move(ctx, space, buffer, found->buffer, bytes);
  if (status == HTP_KERNEL_OK) status = settle(ctx, space);
  pthread_mutex_lock(&state->lock);
  if (status != HTP_KERNEL_OK) found->status = HTP_ERR_SYSTEM;
  found->state = MSG_DONE;
  pthread_cond_broadcast(&state->wake);
  pthread_mutex_unlock(&state->lock);
  return status == HTP_KERNEL_OK ? HTP_OK : htp__kernel_failed(ctx, status, "htp_recv");
}

/* ===== Faults =========================================================== */

static htp_result local_wait_failure(htp_ctx *ctx, double deadline) {
  local_world *state = state_of(ctx->world);
  pthread_mutex_lock(&state->lock);
  while (!failed(ctx->world) && htp_now() < deadline) wait_until(state, deadline);
  pthread_mutex_unlock(&state->lock);
  return htp__world_failure_for(ctx->world, ctx->rank);
}

const htp__backend_ops htp__local_ops = {
    .name = "local",
    .world_init = local_world_init,
    .world_destroy = local_world_destroy,
    .ctx_init = NULL,
    .ctx_destroy = NULL,
    .allreduce_sum = local_allreduce,
    .allreduce_sum_epilogue = local_allreduce_epilogue,
    .allgather = local_allgather,
    .broadcast = local_broadcast,
    .send = local_send,
    .recv = local_recv,
    .barrier = local_barrier,
    .notify_failure = local_notify_failure,
    .wait_failure = local_wait_failure,
};
