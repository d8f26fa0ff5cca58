/*===- runtime/ctx.c - worlds, contexts, errors, argument checks ----------===*
 *
 * The backend-independent half of the runtime core: result strings, world
 * and context lifecycles, the per-context error message, the world's failure
 * state, and the public collectives, which check their arguments and the
 * world's health here before handing over to the backend vtable with a
 * deadline.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "runtime/comm_internal.h"
#include "runtime/htp_ops.h"
#include "runtime/profile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===== Results and time ================================================= */

const char *htp_strerror(htp_result result) {
  switch (result) {
  case HTP_OK: return "success";
  case HTP_ERR_INVALID: return "invalid argument";
  case HTP_ERR_NOMEM: return "out of memory";
  case HTP_ERR_TIMEOUT: return "deadline passed (a peer hung or is too slow)";
  case HTP_ERR_REMOTE: return "a peer failed or aborted";
  case HTP_ERR_SYSTEM: return "system error (OS, MPI, CUDA or NCCL)";
  case HTP_ERR_UNSUPPORTED: return "unsupported (not built in)";
  case HTP_ERR_INTERNAL: return "internal error";
  case HTP_RESULT_COUNT: break;
  }
  return "unknown result code";
}

double htp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double htp_thread_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct timespec htp__timespec(double seconds) {
  struct timespec ts;
  if (seconds < 0) seconds = 0;
  if (seconds > 4e9) seconds = 4e9;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

void htp__sleep(double seconds) {
  if (!(seconds > 0)) return;
  struct timespec ts = htp__timespec(seconds);
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

/* ===== Errors ============================================================ */

static void format_message(char *buffer, const char *format, va_list args) {
  vsnprintf(buffer, HTP__MESSAGE_SIZE, format, args);
}

htp_result htp__ctx_error(htp_ctx *ctx, htp_result code, const char *format, ...) {
  if (ctx) {
    va_list args;
    va_start(args, format);
    format_message(ctx->last_error, format, args);
    va_end(args);
    ++ctx->error_count;
  }
  return code;
}

/* World-level failures (htp_ctx_create, htp_world_add_fault) are reported
 * per calling thread, like errno: ranks create their contexts concurrently,
 * and one shared buffer let a rank read its peer's half-written message. */
static _Thread_local struct {
  const htp_world *world;
  char text[HTP__MESSAGE_SIZE];
} thread_world_error;

void htp__world_message(const htp_world *world, const char *format, ...) {
  va_list args;
  va_start(args, format);
  format_message(thread_world_error.text, format, args);
  thread_world_error.world = world;
  va_end(args);
}

static void world_fail_v(htp_world *world, htp_ctx *ctx, htp_result code, int origin,
                         int announce, const char *format, va_list args) {
  if (code == HTP_OK) code = HTP_ERR_REMOTE;
  int healthy = 0;
  pthread_mutex_lock(&world->lock);
  if (atomic_load(&world->fail_code) == HTP_OK) {
    format_message(world->fail_message, format, args);
    atomic_store(&world->fail_origin, origin);
    /* Published last: a reader that sees the code sees origin and message. */
    atomic_store(&world->fail_code, (int)code);
    healthy = 1;
  }
  pthread_mutex_unlock(&world->lock);
  if (healthy && announce && world->ops && world->ops->notify_failure)
    world->ops->notify_failure(world, ctx);
}

void htp__world_fail(htp_world *world, htp_ctx *ctx, htp_result code, int origin,
                     const char *format, ...) {
  va_list args;
  va_start(args, format);
  world_fail_v(world, ctx, code, origin, 1, format, args);
  va_end(args);
}

void htp__world_fail_alike(htp_world *world, htp_ctx *ctx, htp_result code, const char *format,
                           ...) {
  va_list args;
  va_start(args, format);
  world_fail_v(world, ctx, code, -1, 0, format, args);
  va_end(args);
}

htp_result htp__fail(htp_ctx *ctx, htp_result code, const char *format, ...) {
  va_list args;
  va_start(args, format);
  format_message(ctx->last_error, format, args);
  va_end(args);
  ++ctx->error_count;
  htp__world_fail(ctx->world, ctx, code, ctx->rank, "rank %d: %s", ctx->rank, ctx->last_error);
  return code;
}

htp_result htp__world_failure_for(const htp_world *world, int rank) {
  int code = atomic_load(&((htp_world *)world)->fail_code);
  if (code == HTP_OK) return HTP_OK;
  if (code == HTP_ERR_TIMEOUT) return HTP_ERR_TIMEOUT;
  int origin = atomic_load(&((htp_world *)world)->fail_origin);
  if (origin == -1 || origin == rank) return (htp_result)code;
  return HTP_ERR_REMOTE;
}

htp_result htp__check_failed(htp_ctx *ctx, const char *what) {
  htp_result code = htp__world_failure_for(ctx->world, ctx->rank);
  if (code == HTP_OK) return HTP_OK;
  char reason[HTP__MESSAGE_SIZE];
  pthread_mutex_lock(&ctx->world->lock);
  memcpy(reason, ctx->world->fail_message, sizeof reason);
  pthread_mutex_unlock(&ctx->world->lock);
  return htp__ctx_error(ctx, code, "%s: the world has failed (%s)", what, reason);
}

/* ===== Worlds ============================================================ */

static htp_result check_config(const htp_config *config, char *message, size_t message_size) {
#define REJECT(...)                                                                            \
  do {                                                                                         \
    if (message && message_size) snprintf(message, message_size, __VA_ARGS__);               \
    return HTP_ERR_INVALID;                                                                    \
  } while (0)
  if (!config) REJECT("htp_world_create: config is NULL");
  if (config->magic != HTP_CONFIG_MAGIC)
    REJECT("htp_world_create: config.magic is 0x%08x, not HTP_CONFIG_MAGIC (start from "
           "HTP_CONFIG_INITIALIZER)",
           (unsigned)config->magic);
  if (config->backend != HTP_BACKEND_LOCAL && config->backend != HTP_BACKEND_MPI &&
      config->backend != HTP_BACKEND_NCCL)
    REJECT("htp_world_create: unknown backend %d", (int)config->backend);
  if (config->backend == HTP_BACKEND_LOCAL && config->world_size < 1)
    REJECT("htp_world_create: world_size is %d; the local backend needs >= 1",
           config->world_size);
  if (config->world_size < 0 || config->world_size > HTP_WORLD_MAX_SIZE)
    REJECT("htp_world_create: world_size is %d; use 1 to %d, or 0 for the size of MPI",
           config->world_size, HTP_WORLD_MAX_SIZE);
  if (config->standbys < 0 || (config->standbys > 0 && config->backend != HTP_BACKEND_MPI))
    REJECT("htp_world_create: standbys is %d; standby processes (>= 0) are the mpi "
           "backend's", config->standbys);
  if (!(config->timeout_s > 0) || config->timeout_s > 1e7)
    REJECT("htp_world_create: timeout_s is %.17g; it must be in (0, 1e7] seconds",
           config->timeout_s);
  if (config->device != HTP_DEVICE_CPU && config->device != HTP_DEVICE_CUDA &&
      config->device != HTP_DEVICE_CHECKED)
    REJECT("htp_world_create: unknown device %d", (int)config->device);
  if (config->matmul_precision != HTP_MATMUL_F32 && config->matmul_precision != HTP_MATMUL_TF32 &&
      config->matmul_precision != HTP_MATMUL_BF16)
    REJECT("htp_world_create: matmul_precision is %d; it is HTP_MATMUL_F32 (0), _TF32 (1) or "
           "_BF16 (2)", (int)config->matmul_precision);
  if (config->fence != 0 && config->fence != 1)
    REJECT("htp_world_create: fence is %d; it is 0 or 1", config->fence);
  if (config->fence &&
      (config->backend != HTP_BACKEND_MPI || !htp_backend_can_shrink(HTP_BACKEND_MPI)))
    REJECT("htp_world_create: fence is the mpi backend's, built against an MPI with ULFM (a "
           "fenced process is a lost one its peers shrink away); this is the %s backend%s",
           config->backend == HTP_BACKEND_MPI ? "mpi" : config->backend == HTP_BACKEND_NCCL
                                                             ? "nccl" : "local",
           config->backend == HTP_BACKEND_MPI ? " without ULFM" : "");
  if (config->sm_counts) {
    if ((config->device != HTP_DEVICE_CUDA && config->device != HTP_DEVICE_CHECKED) ||
        config->backend != HTP_BACKEND_LOCAL)
      REJECT("htp_world_create: sm_counts partitions one GPU among the threads of a local "
             "world: it needs device CUDA (or the checked device) and the local backend");
    for (int r = 0; r < config->world_size; r++)
      if (config->sm_counts[r] < 0)
        REJECT("htp_world_create: sm_counts[%d] is %d; SM counts are >= 0 (0: the whole "
               "device)", r, (int)config->sm_counts[r]);
  }
  return HTP_OK;
#undef REJECT
}

/* A shrink's parent and where the lost ranks go: create_world then makes
 * the backend state with shrink_init instead of world_init; or (adopt) a
 * backend's own maker of the state (htp__world_adopt). */
typedef struct world_origin {
  htp_world *parent;
  int32_t *lost;
  int capacity, *num_lost;
  htp_result (*adopt)(htp_world *world, void *arg, char *message, size_t message_size);
  void *adopt_arg;
} world_origin;

static htp_result create_world(const htp_config *config, const htp__backend_ops *ops,
                               const world_origin *origin, htp_world **world_out, char *message,
                               size_t message_size) {
  htp_world *world = calloc(1, sizeof *world);
  if (!world) {
    if (message && message_size) snprintf(message, message_size, "htp_world_create: out of memory");
    return HTP_ERR_NOMEM;
  }
  world->config = *config;
  world->ops = ops;
  world->process_rank = -1;
  atomic_init(&world->fail_code, HTP_OK);
  atomic_init(&world->fail_origin, -1);
  atomic_init(&world->device_sms, 0);
  if (config->sm_counts) { /* the world's own copy (check_config: local, world_size >= 1) */
    world->sm_counts = malloc((size_t)config->world_size * sizeof *world->sm_counts);
    if (!world->sm_counts) {
      free(world);
      if (message && message_size)
        snprintf(message, message_size, "htp_world_create: out of memory for %d SM counts",
                 config->world_size);
      return HTP_ERR_NOMEM;
    }
    memcpy(world->sm_counts, config->sm_counts,
           (size_t)config->world_size * sizeof *world->sm_counts);
    world->config.sm_counts = world->sm_counts;
  }
  if (pthread_mutex_init(&world->lock, NULL) != 0) {
    free(world->sm_counts);
    free(world);
    return HTP_ERR_SYSTEM;
  }
  char local_message[HTP__MESSAGE_SIZE] = "";
  htp_result rc = origin && origin->adopt
                      ? origin->adopt(world, origin->adopt_arg, local_message,
                                      sizeof local_message)
                  : origin ? ops->shrink_init(world, origin->parent, origin->lost,
                                              origin->capacity, origin->num_lost, local_message,
                                              sizeof local_message)
                           : ops->world_init(world, local_message, sizeof local_message);
  if (rc == HTP_OK) { /* a standby's world has no ranks */
    world->rank_taken = calloc(world->size > 0 ? (size_t)world->size : 1, 1);
    if (!world->rank_taken) {
      ops->world_destroy(world);
      rc = HTP_ERR_NOMEM;
      snprintf(local_message, sizeof local_message, "htp_world_create: out of memory");
    }
  }
  if (rc != HTP_OK) {
    /* A backend that failed without saying why (out of memory for a world
     * of 2^30 ranks): the code's own words, never an empty message. */
    if (!local_message[0])
      snprintf(local_message, sizeof local_message, "htp_world_create: %s (world_size %d, %s "
               "backend)", htp_strerror(rc), config->world_size, ops->name);
    if (message && message_size) snprintf(message, message_size, "%s", local_message);
    pthread_mutex_destroy(&world->lock);
    free(world->sm_counts);
    free(world);
    return rc;
  }
  *world_out = world;
  return HTP_OK;
}

htp_result htp__world_create_backend(const htp_config *config, const htp__backend_ops *ops,
                                     htp_world **world_out, char *message, size_t message_size) {
  return create_world(config, ops, NULL, world_out, message, message_size);
}

htp_result htp__world_adopt(const htp_world *like,
                            htp_result (*init)(htp_world *, void *, char *, size_t), void *arg,
                            htp_world **world_out, char *message, size_t message_size) {
  const world_origin origin = {NULL, NULL, 0, NULL, init, arg};
  return create_world(&like->config, like->ops, &origin, world_out, message, message_size);
}

htp_result htp_world_shrink(htp_world *world, htp_world **survivors, int32_t *lost, int capacity,
                            int *num_lost) {
  if (!world || !survivors || !num_lost || capacity < 0 || (capacity > 0 && !lost)) {
    if (world)
      htp__world_message(world, "htp_world_shrink: survivors or num_lost is NULL, or lost is "
                                "NULL with capacity %d", capacity);
    return HTP_ERR_INVALID;
  }
  *survivors = NULL;
  *num_lost = 0;
  if (!world->ops->shrink_init) {
    htp__world_message(world, "htp_world_shrink: the %s backend cannot shrink a world%s",
                       world->ops->name,
                       world->config.backend == HTP_BACKEND_LOCAL
                           ? " (its ranks are threads of this process: make a new world)"
                           : " (it needs Open MPI's ULFM: an MPI with MPIX_Comm_shrink)");
    return HTP_ERR_UNSUPPORTED;
  }
  const world_origin origin = {world, lost, capacity, num_lost, NULL, NULL};
  char message[HTP__MESSAGE_SIZE] = "";
  htp_result rc = create_world(&world->config, world->ops, &origin, survivors, message,
                               sizeof message);
  if (rc != HTP_OK) htp__world_message(world, "%s", message);
  return rc;
}

htp_result htp_world_create_verbose(const htp_config *config, htp_world **world,
                                    char *message, size_t message_size) {
  if (message && message_size) message[0] = '\0';
  if (!world) {
    if (message && message_size) snprintf(message, message_size, "htp_world_create: world is NULL");
    return HTP_ERR_INVALID;
  }
  *world = NULL;
  htp_result rc = check_config(config, message, message_size);
  if (rc != HTP_OK) return rc;
#ifndef HTP_HAVE_CUDA_KERNELS
  if (config->device == HTP_DEVICE_CUDA) {
    if (message && message_size)
      snprintf(message, message_size,
               "htp_world_create: the CUDA kernel table was not built in (build with CUDA)");
    return HTP_ERR_UNSUPPORTED;
  }
#endif
  const htp__backend_ops *ops = NULL;
  switch (config->backend) {
  case HTP_BACKEND_LOCAL: ops = &htp__local_ops; break;
  case HTP_BACKEND_MPI:
#ifdef HTP_HAVE_MPI
    ops = &htp__mpi_ops;
#endif
    break;
  case HTP_BACKEND_NCCL:
#ifdef HTP_HAVE_NCCL
    ops = &htp__nccl_ops;
#endif
    break;
  }
  if (!ops) {
    if (message && message_size)
      snprintf(message, message_size, "htp_world_create: the %s backend was not built in",
               config->backend == HTP_BACKEND_MPI ? "mpi" : "nccl");
    return HTP_ERR_UNSUPPORTED;
  }
  return htp__world_create_backend(config, ops, world, message, message_size);
}

htp_result htp_world_create(const htp_config *config, htp_world **world) {
  return htp_world_create_verbose(config, world, NULL, 0);
}

int htp_world_is_standby(const htp_world *world) {
  return world && world->ops->is_standby && world->ops->is_standby(world);
}

/* Standbys are the mpi backend's (its ops); elsewhere HTP_ERR_UNSUPPORTED. */
static htp_result no_standbys(htp_world *world) {
  if (!world) return HTP_ERR_INVALID;
  htp__world_message(world, "standby processes are the mpi backend's (this world is %s's)",
                     world->ops->name);
  return HTP_ERR_UNSUPPORTED;
}

htp_result htp_world_standby_wait(htp_world *world, htp_world **joined) {
  if (!world || !world->ops->standby_wait) return no_standbys(world);
  return world->ops->standby_wait(world, joined);
}

htp_result htp_world_grow(htp_world *world, int32_t rank, htp_world **grown) {
  if (!world || !world->ops->grow) return no_standbys(world);
  return world->ops->grow(world, rank, grown);
}

htp_result htp_world_fence_rest(htp_world *world) {
  if (!world) return HTP_ERR_INVALID;
  if (world->ops->fence_rest) world->ops->fence_rest(world);
  return HTP_OK;
}

htp_result htp_world_release_standbys(htp_world *world) {
  if (!world || !world->ops->release_standbys) return no_standbys(world);
  return world->ops->release_standbys(world);
}

int htp_backend_can_shrink(htp_backend backend) {
#ifdef HTP_HAVE_MPI
  if (backend == HTP_BACKEND_MPI) return htp__mpi_ops.shrink_init != NULL;
#endif
  (void)backend;
  return 0;
}

int htp_backend_available(htp_backend backend) {
  switch (backend) {
  case HTP_BACKEND_LOCAL: return 1;
  case HTP_BACKEND_MPI:
#ifdef HTP_HAVE_MPI
    return 1;
#else
    return 0;
#endif
  case HTP_BACKEND_NCCL:
#ifdef HTP_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
  }
  return 0;
}

void htp_world_destroy(htp_world *world) {
  if (!world) return;
  /* A context left would read the freed world: keep it (a leak, said) rather
   * than let a misuse become a use after free. */
  pthread_mutex_lock(&world->lock);
  int live = -1;
  for (int r = 0; r < world->size && live < 0; ++r)
    if (world->rank_taken && world->rank_taken[r]) live = r;
  pthread_mutex_unlock(&world->lock);
  if (live >= 0) {
    fprintf(stderr, "htp_world_destroy: rank %d still has a context (destroy every context "
            "first): the world is left allocated\n", live);
    if (world->ops->fence_rest) world->ops->fence_rest(world); /* no wait comes any more */
    return;
  }
  /* A world made later at the same address must not read this one's message. */
  if (thread_world_error.world == world) thread_world_error.world = NULL;
  world->ops->world_destroy(world);
  pthread_mutex_destroy(&world->lock);
  free(world->rank_taken);
  free(world->faults);
  free(world->sm_counts);
  free(world);
}

int htp_world_size(const htp_world *world) { return world ? world->size : 0; }

int htp_world_process_rank(const htp_world *world) { return world ? world->process_rank : -1; }

htp_backend htp_world_backend(const htp_world *world) {
  return world ? world->config.backend : HTP_BACKEND_LOCAL;
}

htp_result htp_world_status(const htp_world *world) {
  if (!world) return HTP_ERR_INVALID;
  return (htp_result)atomic_load(&((htp_world *)world)->fail_code);
}

const char *htp_world_last_error(const htp_world *world) {
  if (!world) return "world is NULL";
  return thread_world_error.world == world ? thread_world_error.text : "";
}

/* ===== Contexts ========================================================== */

/* The table's statuses are htp_result values (kernels/htp_kernel_table.h
 * repeats them so that kernels/ does not include the runtime). */
_Static_assert(HTP_KERNEL_OK == (int)HTP_OK, "kernel status OK");
_Static_assert(HTP_KERNEL_ERR_INVALID == (int)HTP_ERR_INVALID, "kernel status INVALID");
_Static_assert(HTP_KERNEL_ERR_NOMEM == (int)HTP_ERR_NOMEM, "kernel status NOMEM");
_Static_assert(HTP_KERNEL_ERR_SYSTEM == (int)HTP_ERR_SYSTEM, "kernel status SYSTEM");
_Static_assert(HTP_KERNEL_ERR_UNSUPPORTED == (int)HTP_ERR_UNSUPPORTED, "kernel status UNSUPPORTED");

/* Without a context: the CPU table, and nowhere to write a message. */
static const htp_kernel_env NO_CONTEXT_ENV = {.device = -1};

const htp_kernel_table *htp__kernel_table(const htp_ctx *ctx) {
  return ctx && ctx->kernels ? ctx->kernels : htp_cpu_kernel_table();
}

const htp_kernel_env *htp__kernel_env(const htp_ctx *ctx) {
  return ctx && ctx->kernels ? &ctx->kernel_env : &NO_CONTEXT_ENV;
}

htp_result htp__kernel_failed(htp_ctx *ctx, htp_kernel_status status, const char *what) {
  htp_result code = status > 0 && status < HTP_RESULT_COUNT ? (htp_result)status
                                                            : HTP_ERR_INTERNAL;
  if (!ctx) return code;
  return htp__fail(ctx, code, "%s: %s", what,
                   ctx->kernel_error[0] ? ctx->kernel_error : htp_strerror(code));
}

/* The device's SMs as the world's first context found them (ranks of a
 * local world share one GPU): every rank then splits the all-reduce's rows
 * by the same number (comm_local.c). */
static void note_device_sms(htp_world *world, int sms) {
  int unknown = 0;
  if (sms > 0) atomic_compare_exchange_strong(&world->device_sms, &unknown, sms);
}

/* The rank's kernel table and environment (htp_config.device). The CUDA
 * environment binds the device the backend gave the rank (nccl), else 0. */
static htp_result kernels_table_init(htp_ctx *ctx) {
  ctx->kernels = htp_cpu_kernel_table();
  htp_kernel_env_init(&ctx->kernel_env, ctx->kernel_error, sizeof ctx->kernel_error);
  const int sm_count = ctx->world->sm_counts ? ctx->world->sm_counts[ctx->rank] : 0;
  if (ctx->world->config.device == HTP_DEVICE_CHECKED) {
    if (htp_checked_kernel_env_create_on(sm_count, &ctx->kernel_env, ctx->kernel_error,
                                         sizeof ctx->kernel_error) != HTP_KERNEL_OK)
      return htp__ctx_error(ctx, HTP_ERR_INVALID, "%s", ctx->kernel_error);
    ctx->kernels = htp_checked_kernel_table();
    note_device_sms(ctx->world, htp_checked_device_sm_count());
    return HTP_OK;
  }
  if (ctx->world->config.device != HTP_DEVICE_CUDA) {
    if (htp_cpu_kernel_env_create(&ctx->kernel_env, ctx->kernel_error,
                                  sizeof ctx->kernel_error) != HTP_KERNEL_OK)
      return htp__ctx_error(ctx, HTP_ERR_NOMEM, "%s", ctx->kernel_error);
    return HTP_OK;
  }
#ifdef HTP_HAVE_CUDA_KERNELS
  const int device = ctx->device >= 0 ? ctx->device : 0;
  if (htp_cuda_kernel_env_create_on(device, sm_count, ctx->cuda_stream, &ctx->kernel_env,
                                    ctx->kernel_error, sizeof ctx->kernel_error) != HTP_KERNEL_OK)
    return htp__ctx_error(ctx, HTP_ERR_SYSTEM, "%s", ctx->kernel_error);
  ctx->kernels = htp_cuda_kernel_table();
  note_device_sms(ctx->world, htp_cuda_device_sm_count(device));
  return HTP_OK;
#else
  return htp__ctx_error(ctx, HTP_ERR_UNSUPPORTED, "the CUDA kernel table was not built in");
#endif
}

static void kernels_destroy(htp_ctx *ctx) {
  if (ctx->kernels && ctx->kernels->device == HTP_KERNEL_DEVICE_CPU)
    htp_cpu_kernel_env_destroy(&ctx->kernel_env);
  if (ctx->kernels && ctx->kernels->device == HTP_KERNEL_DEVICE_CHECKED)
    htp_checked_kernel_env_destroy(&ctx->kernel_env);
#ifdef HTP_HAVE_CUDA_KERNELS
  if (ctx->kernels && ctx->kernels->device == HTP_KERNEL_DEVICE_CUDA)
    htp_cuda_kernel_env_destroy(&ctx->kernel_env);
#endif
  ctx->kernels = NULL;
}

/* The rank's kernel table and environment, at the world's matmul precision. */
static htp_result kernels_init(htp_ctx *ctx) {
  const htp_result rc = kernels_table_init(ctx);
  if (rc != HTP_OK) return rc;
  const int32_t precision = ctx->world->config.matmul_precision;
  if (!ctx->kernels->set_matmul_precision) {
    if (precision == HTP_MATMUL_F32) return HTP_OK;
    kernels_destroy(ctx);
    return htp__ctx_error(ctx, HTP_ERR_UNSUPPORTED,
                          "these kernels compute their products in f32 only");
  }
  if (ctx->kernels->set_matmul_precision(&ctx->kernel_env, precision) != HTP_KERNEL_OK) {
    htp__ctx_error(ctx, HTP_ERR_INVALID, "%s", ctx->kernel_error);
    kernels_destroy(ctx);
    return HTP_ERR_INVALID;
  }
  return HTP_OK;
}

htp_result htp_ctx_create(htp_world *world, int rank, htp_ctx **ctx_out) {
  if (!world) return HTP_ERR_INVALID;
  if (!ctx_out) {
    htp__world_message(world, "htp_ctx_create: ctx is NULL");
    return HTP_ERR_INVALID;
  }
  *ctx_out = NULL;
  if (htp_world_is_standby(world)) {
    htp__world_message(world, "htp_ctx_create: a standby process has no rank until "
                              "htp_world_standby_wait gives it a world");
    return HTP_ERR_INVALID;
  }
  if (rank < 0 || rank >= world->size) {
    htp__world_message(world, "htp_ctx_create: rank %d is out of range [0, %d)", rank, world->size);
    return HTP_ERR_INVALID;
  }
  if (world->process_rank >= 0 && rank != world->process_rank) {
    htp__world_message(world, "htp_ctx_create: rank %d is not this process's rank %d", rank,
                  world->process_rank);
    return HTP_ERR_INVALID;
  }
  pthread_mutex_lock(&world->lock);
  int taken = world->rank_taken[rank];
  if (!taken) world->rank_taken[rank] = 1;
  pthread_mutex_unlock(&world->lock);
  if (taken) {
    htp__world_message(world, "htp_ctx_create: rank %d already has a context", rank);
    return HTP_ERR_INVALID;
  }
  htp_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    pthread_mutex_lock(&world->lock);
    world->rank_taken[rank] = 0;
    pthread_mutex_unlock(&world->lock);
    htp__world_message(world, "htp_ctx_create: out of memory");
    htp__world_fail(world, NULL, HTP_ERR_NOMEM, rank,
                    "rank %d could not create its context: out of memory", rank);
    return HTP_ERR_NOMEM;
  }
  ctx->world = world;
  ctx->rank = rank;
  ctx->device = -1;
  htp_result rc = world->ops->ctx_init ? world->ops->ctx_init(ctx) : HTP_OK;
  if (rc == HTP_OK) {
    rc = kernels_init(ctx);
    if (rc != HTP_OK && world->ops->ctx_destroy) world->ops->ctx_destroy(ctx);
  }
  if (rc != HTP_OK) {
    htp__world_message(world, "htp_ctx_create: rank %d: %s", rank, ctx->last_error);
    /* The peers may already wait in their first collective: without a
     * context there is nothing for the caller to abort, so the world fails
     * here (as for out of memory above) and they learn it at once, not at
     * the deadline. */
    htp__world_fail(world, NULL, rc, rank, "rank %d could not create its context: %s", rank,
                    ctx->last_error);
    pthread_mutex_lock(&world->lock);
    world->rank_taken[rank] = 0;
    pthread_mutex_unlock(&world->lock);
    free(ctx);
    return rc;
  }
  *ctx_out = ctx;
  return HTP_OK;
}

void htp_ctx_destroy(htp_ctx *ctx) {
  if (!ctx) return;
  /* The balancer reads its context to free its device memory and detach:
   * kept (a leak, said), as a world with a context left is, rather than a
   * later htp_balancer_destroy reading freed memory. */
  if (ctx->balancer) {
    fprintf(stderr, "htp_ctx_destroy: rank %d still has a balancer (destroy it first): the "
            "context is left allocated\n", ctx->rank);
    return;
  }
  htp_world *world = ctx->world;
  htp_ctx_profile_stop(ctx);
  kernels_destroy(ctx);
  if (world->ops->ctx_destroy) world->ops->ctx_destroy(ctx);
  pthread_mutex_lock(&world->lock);
  world->rank_taken[ctx->rank] = 0;
  pthread_mutex_unlock(&world->lock);
  free(ctx);
}

int htp_ctx_rank(const htp_ctx *ctx) { return ctx ? ctx->rank : -1; }
int htp_ctx_size(const htp_ctx *ctx) { return ctx ? ctx->world->size : 0; }
int htp_ctx_device(const htp_ctx *ctx) { return ctx ? ctx->device : -1; }
void *htp_ctx_cuda_stream(const htp_ctx *ctx) { return ctx ? ctx->cuda_stream : NULL; }
htp_world *htp_ctx_world(const htp_ctx *ctx) { return ctx ? ctx->world : NULL; }

uint64_t htp_ctx_error_count(const htp_ctx *ctx) { return ctx ? ctx->error_count : 0; }

const char *htp_last_error(const htp_ctx *ctx) {
  if (!ctx) return "ctx is NULL";
  return ctx->last_error;
}

/* ===== Collectives and transfers ======================================== */

/* Every entry point: a NULL ctx has nowhere to put a message; a failed world
 * fails fast; bad arguments fail the world too (so that the peers, already
 * waiting in the same collective, learn it at once instead of at the
 * deadline). */
#define ENTER(ctx, what)                                                                       \
  do {                                                                                         \
    if (!(ctx)) return HTP_ERR_INVALID;                                                        \
    htp_result entered_ = htp__check_failed((ctx), (what));                                    \
    if (entered_ != HTP_OK) return entered_;                                                   \
  } while (0)

static double deadline_of(const htp_ctx *ctx) { return htp_now() + ctx->world->config.timeout_s; }

/* On a device the rank's own queued kernels finish first, outside the
 * count: a host clock around a collective would otherwise book them as
 * communication, and compute = wall - comm would lose them (DESIGN §10). */
static htp_result settle_stream(htp_ctx *ctx, const char *what) {
  const htp_kernel_table *table = htp__kernel_table(ctx);
  if (table->device == HTP_KERNEL_DEVICE_CPU || !table->synchronize) return HTP_OK;
  htp_kernel_status status = table->synchronize(htp__kernel_env(ctx));
  return status == HTP_KERNEL_OK ? HTP_OK : htp__kernel_failed(ctx, status, what);
}

/* The ranks' arguments compared before any data moves where the backend
 * has an agreement (mpi); local compares them at its rendezvous, nccl does
 * not yet. */
static htp_result agree(htp_ctx *ctx, const htp__collective_args *args) {
  if (!args || !ctx->world->ops->agree || ctx->world->size == 1) return HTP_OK;
  return ctx->world->ops->agree(ctx, args, deadline_of(ctx));
}

/* Hands over to the backend (once the ranks agree on the call's `args`, a
 * collective's; NULL: a point-to-point call) and adds the time spent there
 * (waiting for peers included, the rank's own queued kernels not) to the
 * context's communication seconds. */
#define BACKEND_CALL(ctx, what, args, call)                                                    \
  do {                                                                                         \
    htp_result settled_ = settle_stream((ctx), (what));                                        \
    if (settled_ != HTP_OK) return settled_;                                                   \
    double started_ = htp_now();                                                               \
    htp_result called_ = agree((ctx), (args));                                                 \
    if (called_ == HTP_OK) called_ = (call);                                                   \
    (ctx)->comm_seconds += htp_now() - started_;                                               \
    return called_;                                                                            \
  } while (0)

double htp_ctx_comm_seconds(const htp_ctx *ctx) { return ctx ? ctx->comm_seconds : 0.0; }

/* Where a collective's buffers must live: the public collectives move the
 * context's device memory (as NCCL does, on device pointers); the runtime's
 * control traffic (timings, plan headers, staged weights) moves host memory
 * over the host world (htp__host_*). The CPU cannot tell the two apart; the
 * checked device can, and refuses a buffer in the wrong space here, before
 * any backend touches it, as a GPU would fault on it. */
static htp_result check_space(htp_ctx *ctx, const char *what, const char *name,
                              const void *buffer, size_t bytes, htp__space space) {
  if (!buffer || bytes == 0 || htp__kernel_table(ctx)->device != HTP_KERNEL_DEVICE_CHECKED)
    return HTP_OK;
  const int on_device = htp_checked_is_device(buffer);
  if (space == HTP__SPACE_DEVICE && !on_device)
    return htp__fail(ctx, HTP_ERR_INVALID,
                     "%s: %s (%p) is host memory; a collective moves the device's memory (NCCL "
                     "takes device pointers): control traffic goes over the host world",
                     what, name, buffer);
  if (space == HTP__SPACE_HOST && on_device)
    return htp__fail(ctx, HTP_ERR_INVALID,
                     "%s: %s (%p) is device memory; the host world moves host memory only",
                     what, name, buffer);
  return HTP_OK;
}

#define SPACE_CHECK(ctx, what, name, buffer, bytes, space)                                     \
  do {                                                                                         \
    htp_result spaced_ = check_space((ctx), (what), (name), (buffer), (bytes), (space));       \
    if (spaced_ != HTP_OK) return spaced_;                                                     \
  } while (0)

/* The backend's sum, the ranks agreed on args (the plain sum's, or the
 * epilogue's that the core runs after it). */
static htp_result sum(htp_ctx *ctx, htp__elem elem, const void *send, void *recv, size_t count,
                      const htp__collective_args *args) {
  BACKEND_CALL(ctx, htp__allreduce_name(elem), args,
               ctx->world->ops->allreduce_sum(ctx, elem, send, recv, count, deadline_of(ctx)));
}

static htp_result allreduce(htp_ctx *ctx, htp__elem elem, const void *send, void *recv,
                            size_t count) {
  const char *what = htp__allreduce_name(elem);
  HTP__PROFILED(ctx, what); /* a call a compiled block makes */
  ENTER(ctx, what);
  HTP__INVALID_IF(ctx, count > 0 && (!send || !recv),
                  "%s: send (%p) or recv (%p) is NULL with count %zu", what, send, recv, count);
  HTP__INVALID_IF(ctx, count > ((size_t)-1) / sizeof(float) / 2, "%s: count %zu is too large", what,
                  count);
  const size_t bytes = count * htp__elem_size(elem);
  HTP__INVALID_IF(ctx, send != recv && htp__overlap(send, bytes, recv, bytes),
                  "%s: send (%p) and recv (%p) overlap without being equal (in place)", what, send,
                  recv);
  SPACE_CHECK(ctx, what, "send", send, bytes, HTP__SPACE_DEVICE);
  SPACE_CHECK(ctx, what, "recv", recv, bytes, HTP__SPACE_DEVICE);
  const htp__collective_args args = htp__collective_args_of(
      htp__allreduce_collective(elem, NULL), HTP__SPACE_DEVICE, count, 0, 0, NULL);
  return sum(ctx, elem, send, recv, count, &args);
}

htp_result htp_allreduce_sum_f32(htp_ctx *ctx, const float *send, float *recv, size_t count) {
  return allreduce(ctx, HTP__ELEM_F32, send, recv, count);
}

htp_result htp_allreduce_sum_bf16(htp_ctx *ctx, const uint16_t *send, uint16_t *recv,
                                  size_t count) {
  return allreduce(ctx, HTP__ELEM_BF16, send, recv, count);
}

htp_result htp__epilogue_rows(htp_ctx *ctx, htp__elem elem, const htp__epilogue *epilogue,
                              void *recv, int64_t first, int64_t rows, int64_t cols) {
  const size_t skip = (size_t)first * (size_t)cols * htp__elem_size(elem);
  char *y = (char *)recv + skip;
  const char *r = epilogue->residual ? (const char *)epilogue->residual + skip : NULL;
  char *normed = epilogue->normed ? (char *)epilogue->normed + skip : NULL;
  const void *b = epilogue->bias;
  htp_result result = HTP_OK;
  if (elem == HTP__ELEM_BF16) {
    uint16_t *out = (uint16_t *)y;
    if (b && r) result = htp_op_bias_add_residual_bf16(ctx, out, b, (const uint16_t *)r, out, rows,
                                                      cols);
    else if (b) result = htp_op_bias_add_bf16(ctx, out, b, out, rows, cols);
    else if (r) result = htp_op_add_bf16(ctx, out, (const uint16_t *)r, out, rows * cols);
    if (result == HTP_OK && normed)
      result = htp_op_layer_norm_bf16(ctx, out, epilogue->norm_weight, epilogue->norm_bias,
                                      (uint16_t *)normed, rows, cols, epilogue->epsilon);
    return result;
  }
  float *out = (float *)y;
  if (b && r) result = htp_op_bias_add_residual_f32(ctx, out, b, (const float *)r, out, rows, cols);
  else if (b) result = htp_op_bias_add_f32(ctx, out, b, out, rows, cols);
  else if (r) result = htp_op_add_f32(ctx, out, (const float *)r, out, rows * cols);
  if (result == HTP_OK && normed)
    result = htp_op_layer_norm_f32(ctx, out, epilogue->norm_weight, epilogue->norm_bias,
                                   (float *)normed, rows, cols, epilogue->epsilon);
  return result;
}

/* The sum, then its epilogue: in the backend where it can run it on the
 * rows each rank sums (local), else over the whole sum on every rank,
 * outside the communication time. */
static htp_result allreduce_epilogue(htp_ctx *ctx, htp__elem elem, const void *send, void *recv,
                                     int64_t rows, int64_t cols, const htp__epilogue *epilogue) {
  const int norm = epilogue->normed != NULL;
  const char *what = htp__allreduce_epilogue_name(elem, norm);
  HTP__PROFILED(ctx, what);
  ENTER(ctx, what);
  HTP__INVALID_IF(ctx, rows < 1 || cols < 1 || rows > INT64_MAX / cols,
                  "%s: rows %lld and cols %lld must be >= 1 (and their product fit)", what,
                  (long long)rows, (long long)cols);
  const size_t count = (size_t)rows * (size_t)cols;
  HTP__INVALID_IF(ctx, !send || !recv, "%s: send (%p) or recv (%p) is NULL", what, send, recv);
  HTP__INVALID_IF(ctx, count > ((size_t)-1) / sizeof(float) / 2, "%s: count %zu is too large",
                  what, count);
  const size_t bytes = count * htp__elem_size(elem);
  const size_t row_bytes = (size_t)cols * htp__elem_size(elem);
  HTP__INVALID_IF(ctx, send != recv && htp__overlap(send, bytes, recv, bytes),
                  "%s: send (%p) and recv (%p) overlap without being equal (in place)", what, send,
                  recv);
  /* What the epilogue reads must not be where a peer's rows land (recv,
   * normed) while it is read. */
  const struct {
    const char *name;
    const void *at;
    size_t bytes;
  } reads[] = {{"bias", epilogue->bias, row_bytes},
               {"residual", epilogue->residual, bytes},
               {"norm weight", epilogue->norm_weight, row_bytes},
               {"norm bias", epilogue->norm_bias, row_bytes}};
  for (size_t i = 0; i < sizeof reads / sizeof *reads; i++) {
    HTP__INVALID_IF(ctx, reads[i].at && htp__overlap(reads[i].at, reads[i].bytes, recv, bytes),
                    "%s: %s (%p) and recv (%p) overlap", what, reads[i].name, reads[i].at, recv);
    HTP__INVALID_IF(ctx, reads[i].at && norm &&
                             htp__overlap(reads[i].at, reads[i].bytes, epilogue->normed, bytes),
                    "%s: %s (%p) and normed (%p) overlap", what, reads[i].name, reads[i].at,
                    epilogue->normed);
    SPACE_CHECK(ctx, what, reads[i].name, reads[i].at, reads[i].bytes, HTP__SPACE_DEVICE);
  }
  if (norm) {
    HTP__INVALID_IF(ctx, !epilogue->norm_weight || !epilogue->norm_bias,
                    "%s: the norm weight (%p) or bias (%p) is NULL", what,
                    epilogue->norm_weight, epilogue->norm_bias);
    HTP__INVALID_IF(ctx, htp__overlap(epilogue->normed, bytes, recv, bytes) ||
                             htp__overlap(epilogue->normed, bytes, send, bytes),
                    "%s: normed (%p) overlaps send (%p) or recv (%p)", what, epilogue->normed,
                    send, recv);
    HTP__INVALID_IF(ctx, !(epilogue->epsilon > 0.0f) || !isfinite(epilogue->epsilon),
                    "%s: epsilon %g must be positive and finite", what,
                    (double)epilogue->epsilon);
    SPACE_CHECK(ctx, what, "normed", epilogue->normed, bytes, HTP__SPACE_DEVICE);
  }
  SPACE_CHECK(ctx, what, "send", send, bytes, HTP__SPACE_DEVICE);
  SPACE_CHECK(ctx, what, "recv", recv, bytes, HTP__SPACE_DEVICE);
  const htp__backend_ops *ops = ctx->world->ops;
  /* Nothing to add or normalise: the plain sum, which meets a peer's plain
   * all-reduce of the same count as one collective on every backend. */
  if (!epilogue->bias && !epilogue->residual && !norm)
    return allreduce(ctx, elem, send, recv, count);
  const htp__collective_args args =
      htp__collective_args_of(htp__allreduce_collective(elem, epilogue), HTP__SPACE_DEVICE, count,
                              (size_t)cols, 0, epilogue);
  if (ops->allreduce_sum_epilogue)
    BACKEND_CALL(ctx, what, &args,
                 ops->allreduce_sum_epilogue(ctx, elem, send, recv, rows, cols, epilogue,
                                             deadline_of(ctx)));
  htp_result r = sum(ctx, elem, send, recv, count, &args);
  return r == HTP_OK ? htp__epilogue_rows(ctx, elem, epilogue, recv, 0, rows, cols) : r;
}

htp_result htp_allreduce_sum_bias_residual_f32(htp_ctx *ctx, const float *send, const float *bias,
                                               const float *residual, float *recv, int64_t rows,
                                               int64_t cols) {
  const htp__epilogue epilogue = {.bias = bias, .residual = residual};
  return allreduce_epilogue(ctx, HTP__ELEM_F32, send, recv, rows, cols, &epilogue);
}

htp_result htp_allreduce_sum_bias_residual_bf16(htp_ctx *ctx, const uint16_t *send,
                                                const uint16_t *bias, const uint16_t *residual,
                                                uint16_t *recv, int64_t rows, int64_t cols) {
  const htp__epilogue epilogue = {.bias = bias, .residual = residual};
  return allreduce_epilogue(ctx, HTP__ELEM_BF16, send, recv, rows, cols, &epilogue);
}

htp_result htp_allreduce_sum_norm_f32(htp_ctx *ctx, const float *send, const float *bias,
                                      const float *residual, float *sum, const float *weight,
                                      const float *norm_bias, float *normed, int64_t rows,
                                      int64_t cols, float epsilon) {
  const htp__epilogue epilogue = {bias, residual, weight, norm_bias, normed, epsilon, 0};
  HTP__INVALID_IF(ctx, !normed, "htp_allreduce_sum_norm_f32: normed is NULL");
  return allreduce_epilogue(ctx, HTP__ELEM_F32, send, sum, rows, cols, &epilogue);
}

htp_result htp_allreduce_sum_norm_bf16(htp_ctx *ctx, const uint16_t *send, const uint16_t *bias,
                                       const uint16_t *residual, uint16_t *sum,
                                       const uint16_t *weight, const uint16_t *norm_bias,
                                       uint16_t *normed, int64_t rows, int64_t cols,
                                       float epsilon) {
  const htp__epilogue epilogue = {bias, residual, weight, norm_bias, normed, epsilon, 0};
  HTP__INVALID_IF(ctx, !normed, "htp_allreduce_sum_norm_bf16: normed is NULL");
  return allreduce_epilogue(ctx, HTP__ELEM_BF16, send, sum, rows, cols, &epilogue);
}

/* A layer norm of x, which every rank holds alike: where the backend can
 * share the work (local: ranks in one address space), each rank normalises
 * its rows and copies them to the others; elsewhere (one rank, mpi, nccl)
 * each normalises the whole of x itself, as htp_op_layer_norm_*. */
static htp_result group_layer_norm(htp_ctx *ctx, htp__elem elem, const void *x,
                                   const void *weight, const void *bias, void *y, int64_t rows,
                                   int64_t cols, float epsilon) {
  const char *what = htp__group_layer_norm_name(elem);
  ENTER(ctx, what);
  HTP__INVALID_IF(ctx, rows < 1 || cols < 1 || rows > INT64_MAX / cols,
                  "%s: rows %lld and cols %lld must be >= 1 (and their product fit)", what,
                  (long long)rows, (long long)cols);
  const size_t count = (size_t)rows * (size_t)cols;
  HTP__INVALID_IF(ctx, count > ((size_t)-1) / sizeof(float) / 2, "%s: count %zu is too large",
                  what, count);
  HTP__INVALID_IF(ctx, !x || !y || !weight || !bias,
                  "%s: x (%p), y (%p), the weight (%p) or the bias (%p) is NULL", what, x, y,
                  weight, bias);
  HTP__INVALID_IF(ctx, !(epsilon > 0.0f) || !isfinite(epsilon),
                  "%s: epsilon %g must be positive and finite", what, (double)epsilon);
  /* Peers write their rows of y while this rank reads its rows of x and
   * the weights: y overlaps none of them. */
  const size_t bytes = count * htp__elem_size(elem), row_bytes = (size_t)cols * htp__elem_size(elem);
  HTP__INVALID_IF(ctx, htp__overlap(x, bytes, y, bytes) ||
                           htp__overlap(weight, row_bytes, y, bytes) ||
                           htp__overlap(bias, row_bytes, y, bytes),
                  "%s: y (%p) overlaps x (%p), the weight (%p) or the bias (%p)", what, y, x,
                  weight, bias);
  SPACE_CHECK(ctx, what, "x", x, bytes, HTP__SPACE_DEVICE);
  SPACE_CHECK(ctx, what, "y", y, bytes, HTP__SPACE_DEVICE);
  SPACE_CHECK(ctx, what, "weight", weight, row_bytes, HTP__SPACE_DEVICE);
  SPACE_CHECK(ctx, what, "bias", bias, row_bytes, HTP__SPACE_DEVICE);
  HTP__PROFILED(ctx, what); /* a call a compiled block makes, shared or not */
  const htp__backend_ops *ops = ctx->world->ops;
  /* Shared wherever the ranks share an address space: on the CPU too,
   * where it costs what each rank's whole norm did (ViT-B/16 at tp 2 on
   * two cores: 0.54-0.59 ms a rank shared, 0.55-0.66 whole). */
  const htp__epilogue epilogue = {.norm_weight = weight, .norm_bias = bias, .normed = y,
                                  .epsilon = epsilon, .replicated = 1};
  const htp__collective_args args =
      htp__collective_args_of(htp__allreduce_collective(elem, &epilogue), HTP__SPACE_DEVICE,
                              count, (size_t)cols, 0, &epilogue);
  if (ctx->world->size == 1 || !ops->allreduce_sum_epilogue) {
    /* Each rank its own whole norm: still the same call as its peers'. */
    const double started = htp_now();
    htp_result agreed = agree(ctx, &args);
    ctx->comm_seconds += htp_now() - started;
    if (agreed != HTP_OK) return agreed;
    return elem == HTP__ELEM_BF16
               ? htp_op_layer_norm_bf16(ctx, x, weight, bias, y, rows, cols, epsilon)
               : htp_op_layer_norm_f32(ctx, x, weight, bias, y, rows, cols, epsilon);
  }
  BACKEND_CALL(ctx, what, &args,
               ops->allreduce_sum_epilogue(ctx, elem, x, NULL, rows, cols, &epilogue,
                                           deadline_of(ctx)));
}

htp_result htp_group_layer_norm_f32(htp_ctx *ctx, const float *x, const float *weight,
                                    const float *bias, float *y, int64_t rows, int64_t cols,
                                    float epsilon) {
  return group_layer_norm(ctx, HTP__ELEM_F32, x, weight, bias, y, rows, cols, epsilon);
}

htp_result htp_group_layer_norm_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *weight,
                                     const uint16_t *bias, uint16_t *y, int64_t rows,
                                     int64_t cols, float epsilon) {
  return group_layer_norm(ctx, HTP__ELEM_BF16, x, weight, bias, y, rows, cols, epsilon);
}

static htp_result allgather(htp_ctx *ctx, htp__space space, const void *send, void *recv,
                            size_t bytes) {
  ENTER(ctx, "htp_allgather");
  HTP__INVALID_IF(ctx, bytes > 0 && (!send || !recv),
                  "htp_allgather: send (%p) or recv (%p) is NULL with bytes %zu", send, recv,
                  bytes);
  HTP__INVALID_IF(ctx, bytes > ((size_t)-1) / 2 / (size_t)ctx->world->size,
                  "htp_allgather: bytes %zu times %d ranks is too large", bytes, ctx->world->size);
  const size_t all = bytes * (size_t)ctx->world->size;
  HTP__INVALID_IF(ctx, send != (const char *)recv + (size_t)ctx->rank * bytes &&
                           htp__overlap(send, bytes, recv, all),
                  "htp_allgather: send (%p) overlaps recv (%p, %zu bytes) without being this "
                  "rank's slot (in place)", send, recv, all);
  SPACE_CHECK(ctx, "htp_allgather", "send", send, bytes, space);
  SPACE_CHECK(ctx, "htp_allgather", "recv", recv, all, space);
  const htp__collective_args args =
      htp__collective_args_of(HTP__OP_ALLGATHER, space, bytes, 0, 0, NULL);
  BACKEND_CALL(ctx, "htp_allgather", &args,
               ctx->world->ops->allgather(ctx, space, send, recv, bytes, deadline_of(ctx)));
}

htp_result htp_allgather(htp_ctx *ctx, const void *send, void *recv, size_t bytes) {
  return allgather(ctx, HTP__SPACE_DEVICE, send, recv, bytes);
}

htp_result htp_allgather_host(htp_ctx *ctx, const void *send, void *recv, size_t bytes) {
  return allgather(ctx, HTP__SPACE_HOST, send, recv, bytes);
}

htp_result htp_broadcast(htp_ctx *ctx, void *buffer, size_t bytes, int root) {
  ENTER(ctx, "htp_broadcast");
  HTP__INVALID_IF(ctx, bytes > 0 && !buffer, "htp_broadcast: buffer is NULL with bytes %zu", bytes);
  HTP__INVALID_IF(ctx, root < 0 || root >= ctx->world->size,
                  "htp_broadcast: root %d is out of range [0, %d)", root, ctx->world->size);
  SPACE_CHECK(ctx, "htp_broadcast", "buffer", buffer, bytes, HTP__SPACE_DEVICE);
  const htp__collective_args args =
      htp__collective_args_of(HTP__OP_BROADCAST, HTP__SPACE_DEVICE, bytes, 0, root, NULL);
  BACKEND_CALL(
      ctx, "htp_broadcast", &args,
      ctx->world->ops->broadcast(ctx, HTP__SPACE_DEVICE, buffer, bytes, root, deadline_of(ctx)));
}

static htp_result check_peer(htp_ctx *ctx, const char *what, const void *buffer, size_t bytes,
                             int peer, int tag) {
  HTP__INVALID_IF(ctx, bytes > 0 && !buffer, "%s: buffer is NULL with bytes %zu", what, bytes);
  HTP__INVALID_IF(ctx, peer < 0 || peer >= ctx->world->size, "%s: peer %d is out of range [0, %d)",
                  what, peer, ctx->world->size);
  HTP__INVALID_IF(ctx, peer == ctx->rank, "%s: peer %d is the calling rank itself", what, peer);
  HTP__INVALID_IF(ctx, tag < 0, "%s: tag %d is negative", what, tag);
  return HTP_OK;
}

static htp_result send(htp_ctx *ctx, htp__space space, const void *buffer, size_t bytes, int peer,
                       int tag) {
  ENTER(ctx, "htp_send");
  htp_result rc = check_peer(ctx, "htp_send", buffer, bytes, peer, tag);
  if (rc != HTP_OK) return rc;
  SPACE_CHECK(ctx, "htp_send", "buffer", buffer, bytes, space);
  BACKEND_CALL(ctx, "htp_send", NULL,
               ctx->world->ops->send(ctx, space, buffer, bytes, peer, tag, deadline_of(ctx)));
}

static htp_result recv(htp_ctx *ctx, htp__space space, void *buffer, size_t bytes, int peer,
                       int tag) {
  ENTER(ctx, "htp_recv");
  htp_result rc = check_peer(ctx, "htp_recv", buffer, bytes, peer, tag);
  if (rc != HTP_OK) return rc;
  SPACE_CHECK(ctx, "htp_recv", "buffer", buffer, bytes, space);
  BACKEND_CALL(ctx, "htp_recv", NULL,
               ctx->world->ops->recv(ctx, space, buffer, bytes, peer, tag, deadline_of(ctx)));
}

htp_result htp_send(htp_ctx *ctx, const void *buffer, size_t bytes, int peer, int tag) {
  return send(ctx, HTP__SPACE_DEVICE, buffer, bytes, peer, tag);
}

htp_result htp_recv(htp_ctx *ctx, void *buffer, size_t bytes, int peer, int tag) {
  return recv(ctx, HTP__SPACE_DEVICE, buffer, bytes, peer, tag);
}

htp_result htp_send_host(htp_ctx *ctx, const void *buffer, size_t bytes, int peer, int tag) {
  return send(ctx, HTP__SPACE_HOST, buffer, bytes, peer, tag);
}

htp_result htp_recv_host(htp_ctx *ctx, void *buffer, size_t bytes, int peer, int tag) {
  return recv(ctx, HTP__SPACE_HOST, buffer, bytes, peer, tag);
}

int htp__space_on_device(const htp_ctx *ctx, htp__space space) {
  return space == HTP__SPACE_DEVICE && htp__kernel_table(ctx)->device != HTP_KERNEL_DEVICE_CPU;
}

/* Bytes between host memory and a buffer of `space`: memcpy where that is
 * host memory, else the table's to_host / to_device. */
static htp_result space_copy(htp_ctx *ctx, htp__space space, void *dst, const void *src,
                             size_t bytes, int to_host, const char *what) {
  if (!bytes) return HTP_OK;
  if (!htp__space_on_device(ctx, space)) {
    memcpy(dst, src, bytes);
    return HTP_OK;
  }
  const htp_kernel_table *table = htp__kernel_table(ctx);
  const htp_kernel_env *env = htp__kernel_env(ctx);
  htp_kernel_status status =
      to_host ? table->to_host(env, dst, src, bytes) : table->to_device(env, dst, src, bytes);
  return status == HTP_KERNEL_OK ? HTP_OK : htp__kernel_failed(ctx, status, what);
}

htp_result htp__space_to_host(htp_ctx *ctx, htp__space space, void *host, const void *src,
                              size_t bytes, const char *what) {
  return space_copy(ctx, space, host, src, bytes, 1, what);
}

htp_result htp__space_from_host(htp_ctx *ctx, htp__space space, void *dst, const void *host,
                                size_t bytes, const char *what) {
  return space_copy(ctx, space, dst, host, bytes, 0, what);
}

htp_result htp_barrier(htp_ctx *ctx) {
  ENTER(ctx, "htp_barrier");
  const htp__collective_args args =
      htp__collective_args_of(HTP__OP_BARRIER, HTP__SPACE_HOST, 0, 0, 0, NULL);
  BACKEND_CALL(ctx, "htp_barrier", &args, ctx->world->ops->barrier(ctx, deadline_of(ctx)));
}

void htp_abort(htp_ctx *ctx, htp_result reason) {
  if (!ctx) return;
  if (reason == HTP_OK || (int)reason < 0 || reason >= HTP_RESULT_COUNT) reason = HTP_ERR_REMOTE;
  htp__world_fail(ctx->world, ctx, reason, ctx->rank, "rank %d aborted (%s)", ctx->rank,
                  htp_strerror(reason));
}
