/*===- runtime/comm_nccl.c - the nccl backend: one rank per GPU ------------===*
 *
 * Each rank drives one GPU of its host through a non-blocking NCCL
 * communicator (ncclConfig_t.blocking = 0) and a stream of its own. The
 * NCCL unique id is bootstrapped over a host world of the same shape: a
 * local world when config.world_size >= 1 (ranks are threads), an MPI world
 * when it is 0 (one process per rank). That host world also carries failure
 * notices, the barrier and the placement check.
 *
 * Placement: the ranks all-gather their host names; a rank's GPU is its
 * index among the ranks of its host (modulo the devices it sees, so one
 * process per GPU under CUDA_VISIBLE_DEVICES works too). They then
 * all-gather (host, PCI bus id) and every rank refuses, with the same
 * message, a world where two ranks of one host drive the same GPU: NCCL
 * cannot (ranks sharing a GPU are the local backend's, with --sms).
 *
 * The rank's stream is also its kernel environment's (runtime/ctx.c passes
 * ctx->cuda_stream to htp_cuda_kernel_env_create_on), so a block's kernels
 * and its collectives are ordered on one stream with no event between them.
 *
 * Every call enqueues on the rank's stream, then polls ncclCommGetAsyncError
 * and cudaStreamQuery against the deadline, so it returns when the
 * operation finished (and the compute enqueued before it: one stream);
 * at the deadline the world fails and the communicator is aborted
 * (ncclCommAbort) when the context goes. Buffers are device pointers. NCCL
 * has no tags: send/recv between a pair are matched in call order whatever
 * the tag, and a size mismatch is not detected.
 *
 * This file is plain C compiled by the host compiler against the CUDA
 * runtime and NCCL headers; it needs no nvcc. Compiled, not run on a GPU
 * yet (runtime.nccl skips without one; the placement logic is tested).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "runtime/comm_internal.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct nccl_world {
  htp_world *host; /* bootstrap: local or mpi */
  int device_count;
} nccl_world;

typedef struct nccl_ctx {
  htp_ctx *host;
  ncclComm_t comm;
  cudaStream_t stream;
  int comm_ready;
} nccl_ctx;

static nccl_world *world_state(htp_world *world) { return (nccl_world *)world->backend; }
static nccl_ctx *ctx_state(htp_ctx *ctx) { return (nccl_ctx *)ctx->backend; }

static int failed(htp_world *world) { return atomic_load(&world->fail_code) != HTP_OK; }

/* ===== Failures: the nccl world and its host world fail together ======== */

static void nccl_notify_failure(htp_world *world, htp_ctx *ctx) {
  (void)ctx;
  nccl_world *state = world_state(world);
  if (!state || !state->host) return;
  htp__world_fail(state->host, NULL, (htp_result)atomic_load(&world->fail_code),
                  atomic_load(&world->fail_origin), "%s", world->fail_message);
}

/* Pumps the host world (mpi: failure notices) and adopts its failure. */
static void poll_host(htp_ctx *ctx) {
  nccl_world *state = world_state(ctx->world);
  nccl_ctx *rank = ctx_state(ctx);
  if (!failed(state->host) && rank && rank->host)
    state->host->ops->wait_failure(rank->host, htp_now() + 1e-4);
  int code = atomic_load(&state->host->fail_code);
  if (code != HTP_OK && !failed(ctx->world))
    htp__world_fail(ctx->world, ctx, (htp_result)code, atomic_load(&state->host->fail_origin),
                    "%s", state->host->fail_message);
}

/* Waits for what was enqueued on the rank's stream, with the deadline. */
static htp_result wait_stream(htp_ctx *ctx, ncclResult_t enqueued, double deadline,
                              const char *what) {
  nccl_ctx *rank = ctx_state(ctx);
  if (enqueued != ncclSuccess && enqueued != ncclInProgress)
    return htp__fail(ctx, HTP_ERR_SYSTEM, "%s: %s", what, ncclGetErrorString(enqueued));
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(rank->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress)
      return htp__fail(ctx, HTP_ERR_SYSTEM, "%s: %s (%s)", what, ncclGetErrorString(async),
                       ncclGetLastError(rank->comm));
    if (async == ncclSuccess) {
      cudaError_t query = cudaStreamQuery(rank->stream);
      if (query == cudaSuccess) return HTP_OK;
      if (query != cudaErrorNotReady)
        return htp__fail(ctx, HTP_ERR_SYSTEM, "%s: %s", what, cudaGetErrorString(query));
    }
    poll_host(ctx);
    if (failed(ctx->world)) return htp__check_failed(ctx, what);
    if (htp_now() > deadline)
      return htp__fail(ctx, HTP_ERR_TIMEOUT, "%s: rank %d waited %.3g s for its peers", what,
                       ctx->rank, ctx->world->config.timeout_s);
  }
}

/* ===== Placement: one GPU per rank ====================================== */

int htp__nccl_local_index(const htp__nccl_place *places, int size, int rank) {
  int index = 0;
  for (int r = 0; r < rank && r < size; ++r)
    index += strncmp(places[r].host, places[rank].host, sizeof places[r].host) == 0;
  return index;
}

int htp__nccl_shared_gpu(const htp__nccl_place *places, int size, int rank) {
  for (int r = 0; r < size; ++r)
    if (r != rank && strncmp(places[r].host, places[rank].host, sizeof places[r].host) == 0 &&
        strncmp(places[r].bus, places[rank].bus, sizeof places[r].bus) == 0)
      return r;
  return -1;
}

/* Chooses ctx->device (see the top of the file) and refuses two ranks on
 * one GPU. Collective over the host world: every rank calls it, and all
 * reach the same verdict from the same gathered table. */
static htp_result place_rank(htp_ctx *ctx, htp_ctx *host, int device_count) {
  const int size = ctx->world->size;
  htp__nccl_place *places = calloc((size_t)size, sizeof *places);
  if (!places) {
    htp_abort(host, HTP_ERR_NOMEM);
    return htp__ctx_error(ctx, HTP_ERR_NOMEM, "out of memory");
  }
  htp__nccl_place *mine = &places[ctx->rank];
  if (gethostname(mine->host, sizeof mine->host - 1) != 0) snprintf(mine->host, sizeof mine->host, "?");
  htp__nccl_place me = *mine;
  htp_result rc = htp_allgather(host, &me, places, sizeof me);
  if (rc == HTP_OK) {
    ctx->device = htp__nccl_local_index(places, size, ctx->rank) % device_count;
    cudaError_t cuda = cudaDeviceGetPCIBusId(me.bus, (int)sizeof me.bus, ctx->device);
    if (cuda != cudaSuccess) snprintf(me.bus, sizeof me.bus, "device %d?", ctx->device);
    rc = htp_allgather(host, &me, places, sizeof me);
  }
  if (rc != HTP_OK) {
    rc = htp__ctx_error(ctx, rc, "placing the ranks on GPUs: %s", htp_last_error(host));
    free(places);
    return rc;
  }
  const int other = htp__nccl_shared_gpu(places, size, ctx->rank);
  if (other >= 0) {
    const int low = other < ctx->rank ? other : ctx->rank;
    const int high = other < ctx->rank ? ctx->rank : other;
    rc = htp__ctx_error(ctx, HTP_ERR_INVALID,
                        "nccl: ranks %d and %d would share the GPU at PCI %s on host %s (%d "
                        "visible there): NCCL needs one GPU per rank; run at most as many "
                        "ranks per host as it has GPUs, or share one GPU among ranks with the "
                        "local backend (ranks as threads; --sms partitions its SMs)",
                        low, high, me.bus, me.host, device_count);
    /* The ranks with a GPU of their own must not wait for the refused
     * ones in the bootstrap: fail the host world too. */
    htp_abort(host, HTP_ERR_INVALID);
  }
  free(places);
  return rc;
}

/* ===== World and contexts =============================================== */

static htp_result nccl_world_init(htp_world *world, char *message, size_t message_size) {
  int devices = 0;
  cudaError_t cuda = cudaGetDeviceCount(&devices);
  if (cuda != cudaSuccess || devices < 1) {
    snprintf(message, message_size, "htp_world_create: nccl needs a CUDA device (%s)",
             cuda != cudaSuccess ? cudaGetErrorString(cuda) : "none found");
    return HTP_ERR_SYSTEM;
  }
  htp_config host_config = world->config;
  const htp__backend_ops *host_ops = &htp__local_ops;
  host_config.backend = HTP_BACKEND_LOCAL;
  host_config.device = HTP_DEVICE_CPU; /* the bootstrap world only moves the id */
  if (world->config.world_size == 0) {
#ifdef HTP_HAVE_MPI
    host_config.backend = HTP_BACKEND_MPI;
    host_ops = &htp__mpi_ops;
#else
    snprintf(message, message_size,
             "htp_world_create: nccl with world_size 0 bootstraps over MPI, which was not "
             "built in");
    return HTP_ERR_UNSUPPORTED;
#endif
  }
  nccl_world *state = calloc(1, sizeof *state);
  if (!state) return HTP_ERR_NOMEM;
  htp_result rc =
      htp__world_create_backend(&host_config, host_ops, &state->host, message, message_size);
  if (rc != HTP_OK) {
    free(state);
    return rc;
  }
  state->device_count = devices;
  world->size = state->host->size;
  world->process_rank = state->host->process_rank;
  world->backend = state;
  return HTP_OK;
}

static void nccl_world_destroy(htp_world *world) {
  nccl_world *state = world_state(world);
  if (!state) return;
  htp_world_destroy(state->host);
  free(state);
  world->backend = NULL;
}

#define CUDA_INIT(call)                                                                        \
  do {                                                                                         \
    cudaError_t cuda_rc_ = (call);                                                             \
    if (cuda_rc_ != cudaSuccess) {                                                             \
      rc = htp__ctx_error(ctx, HTP_ERR_SYSTEM, "%s: %s", #call, cudaGetErrorString(cuda_rc_)); \
      goto fail;                                                                               \
    }                                                                                          \
  } while (0)

static htp_result nccl_ctx_init(htp_ctx *ctx) {
  nccl_world *state = world_state(ctx->world);
  htp_result rc = HTP_OK;
  nccl_ctx *rank = calloc(1, sizeof *rank);
  if (!rank) return htp__ctx_error(ctx, HTP_ERR_NOMEM, "out of memory");
  ctx->backend = rank;
  rc = htp_ctx_create(state->host, ctx->rank, &rank->host);
  if (rc != HTP_OK) {
    htp__ctx_error(ctx, rc, "bootstrap: %s", htp_world_last_error(state->host));
    goto fail;
  }
  rc = place_rank(ctx, rank->host, state->device_count);
  if (rc != HTP_OK) goto fail;
  CUDA_INIT(cudaSetDevice(ctx->device));
  CUDA_INIT(cudaStreamCreateWithFlags(&rank->stream, cudaStreamNonBlocking));
  ctx->cuda_stream = rank->stream;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (ctx->rank == 0) {
    ncclResult_t nccl = ncclGetUniqueId(&id);
    if (nccl != ncclSuccess) {
      rc = htp__ctx_error(ctx, HTP_ERR_SYSTEM, "ncclGetUniqueId: %s", ncclGetErrorString(nccl));
      htp_abort(rank->host, HTP_ERR_SYSTEM);
      goto fail;
    }
  }
  rc = htp_broadcast(rank->host, &id, sizeof id, 0);
  if (rc != HTP_OK) {
    htp__ctx_error(ctx, rc, "bootstrap broadcast of the NCCL id: %s", htp_last_error(rank->host));
    goto fail;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t nccl = ncclCommInitRankConfig(&rank->comm, ctx->world->size, id, ctx->rank, &config);
  double deadline = htp_now() + ctx->world->config.timeout_s;
  while (nccl == ncclInProgress) {
    if (htp_now() > deadline) {
      ncclCommAbort(rank->comm);
      rank->comm = NULL;
      rc = htp__ctx_error(ctx, HTP_ERR_TIMEOUT, "ncclCommInitRankConfig did not finish in %.3g s",
                          ctx->world->config.timeout_s);
      htp_abort(rank->host, HTP_ERR_TIMEOUT);
      goto fail;
    }
    htp__sleep(1e-4);
    ncclCommGetAsyncError(rank->comm, &nccl);
  }
  if (nccl != ncclSuccess) {
    if (rank->comm) ncclCommAbort(rank->comm);
    rank->comm = NULL;
    rc = htp__ctx_error(ctx, HTP_ERR_SYSTEM, "ncclCommInitRankConfig: %s",
                        ncclGetErrorString(nccl));
    htp_abort(rank->host, HTP_ERR_SYSTEM);
    goto fail;
  }
  rank->comm_ready = 1;
  return HTP_OK;
fail:
  if (rank->stream) cudaStreamDestroy(rank->stream);
  htp_ctx_destroy(rank->host);
  free(rank);
  ctx->backend = NULL;
  ctx->cuda_stream = NULL;
  return rc;
}

static void nccl_ctx_destroy(htp_ctx *ctx) {
  nccl_ctx *rank = ctx_state(ctx);
  if (!rank) return;
  cudaSetDevice(ctx->device);
  if (rank->comm) {
    int clean = !failed(ctx->world);
    if (clean) {
      /* Non-blocking finalize, polled with the deadline like everything. */
      ncclResult_t nccl = ncclCommFinalize(rank->comm);
      double deadline = htp_now() + ctx->world->config.timeout_s;
      while (nccl == ncclInProgress && htp_now() < deadline) {
        htp__sleep(1e-4);
        ncclCommGetAsyncError(rank->comm, &nccl);
      }
      clean = nccl == ncclSuccess;
    }
    if (clean) ncclCommDestroy(rank->comm);
    else ncclCommAbort(rank->comm);
  }
  if (rank->stream) cudaStreamDestroy(rank->stream);
  htp_ctx_destroy(rank->host);
  free(rank);
  ctx->backend = NULL;
  ctx->cuda_stream = NULL;
}

/* ===== Collectives and transfers ======================================== */

static htp_result nccl_allreduce(htp_ctx *ctx, htp__elem elem, const void *send, void *recv,
                                 size_t count, double deadline) {
  nccl_ctx *rank = ctx_state(ctx);
  cudaSetDevice(ctx->device);
  ncclDataType_t type = elem == HTP__ELEM_BF16 ? ncclBfloat16 : ncclFloat;
  ncclResult_t nccl = ncclAllReduce(send, recv, count, type, ncclSum, rank->comm, rank->stream);
  return wait_stream(ctx, nccl, deadline, htp__allreduce_name(elem));
}

/* A call on the host world for the rank: its failure fails the nccl world
 * too, with the host world's message. */
static htp_result host_result(htp_ctx *ctx, htp_result rc) {
  if (rc == HTP_OK) return HTP_OK;
  return htp__fail(ctx, rc, "the host world: %s", htp_last_error(ctx_state(ctx)->host));
}

/* Host memory (the runtime's control traffic) goes over the host world,
 * never NCCL, which takes device pointers only. */
static htp_result nccl_allgather(htp_ctx *ctx, htp__space space, const void *send, void *recv,
                                 size_t bytes, double deadline) {
  nccl_ctx *rank = ctx_state(ctx);
  if (space == HTP__SPACE_HOST) return host_result(ctx, htp_allgather(rank->host, send, recv, bytes));
  cudaSetDevice(ctx->device);
  ncclResult_t nccl = ncclAllGather(send, recv, bytes, ncclChar, rank->comm, rank->stream);
  return wait_stream(ctx, nccl, deadline, "htp_allgather");
}

static htp_result nccl_broadcast(htp_ctx *ctx, htp__space space, void *buffer, size_t bytes,
                                 int root, double deadline) {
  nccl_ctx *rank = ctx_state(ctx);
  if (space == HTP__SPACE_HOST)
    return host_result(ctx, htp_broadcast(rank->host, buffer, bytes, root));
  cudaSetDevice(ctx->device);
  ncclResult_t nccl = ncclBroadcast(buffer, buffer, bytes, ncclChar, root, rank->comm, rank->stream);
  return wait_stream(ctx, nccl, deadline, "htp_broadcast");
}

static htp_result nccl_send(htp_ctx *ctx, htp__space space, const void *buffer, size_t bytes,
                            int peer, int tag, double deadline) {
  nccl_ctx *rank = ctx_state(ctx);
  if (space == HTP__SPACE_HOST)
    return host_result(ctx, htp_send(rank->host, buffer, bytes, peer, tag));
  cudaSetDevice(ctx->device);
  ncclResult_t nccl = ncclSend(buffer, bytes, ncclChar, peer, rank->comm, rank->stream);
  return wait_stream(ctx, nccl, deadline, "htp_send");
}

static htp_result nccl_recv(htp_ctx *ctx, htp__space space, void *buffer, size_t bytes,
                            int peer, int tag, double deadline) {
  nccl_ctx *rank = ctx_state(ctx);
  if (space == HTP__SPACE_HOST)
    return host_result(ctx, htp_recv(rank->host, buffer, bytes, peer, tag));
  cudaSetDevice(ctx->device);
  ncclResult_t nccl = ncclRecv(buffer, bytes, ncclChar, peer, rank->comm, rank->stream);
  return wait_stream(ctx, nccl, deadline, "htp_recv");
}

/* The rank's stream drains, then the host world meets. */
static htp_result nccl_barrier(htp_ctx *ctx, double deadline) {
  nccl_ctx *rank = ctx_state(ctx);
  htp_result rc = wait_stream(ctx, ncclSuccess, deadline, "htp_barrier");
  if (rc != HTP_OK) return rc;
  rc = htp_barrier(rank->host);
  if (rc != HTP_OK) {
    poll_host(ctx);
    return htp__ctx_error(ctx, rc, "htp_barrier: %s", htp_last_error(rank->host));
  }
  return HTP_OK;
}

static htp_result nccl_wait_failure(htp_ctx *ctx, double deadline) {
  nccl_ctx *rank = ctx_state(ctx);
  world_state(ctx->world)->host->ops->wait_failure(rank->host, deadline);
  poll_host(ctx);
  return htp__world_failure_for(ctx->world, ctx->rank);
}

const htp__backend_ops htp__nccl_ops = {
    .name = "nccl",
    .world_init = nccl_world_init,
    .world_destroy = nccl_world_destroy,
    .ctx_init = nccl_ctx_init,
    .ctx_destroy = nccl_ctx_destroy,
    .allreduce_sum = nccl_allreduce,
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .notify_failure = nccl_notify_failure,
    .wait_failure = nccl_wait_failure,
};
