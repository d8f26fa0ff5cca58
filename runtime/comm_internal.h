/*===- runtime/comm_internal.h - worlds, contexts and the backend vtable ---===*
 *
 * Private to libhtprt. The runtime core (ctx.c) checks arguments, keeps the
 * per-context error message and the world's failure state, then calls one of
 * the backends (comm_local.c, comm_mpi.c, comm_nccl.c) through
 * htp__backend_ops. Backends only move bytes and wait against deadlines; they
 * report failures through htp__ctx_error / htp__world_fail.
 *
 * Deadlines are absolute htp_now() seconds (CLOCK_MONOTONIC).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_COMM_INTERNAL_H
#define HTP_COMM_INTERNAL_H

#include "runtime/htp.h"

#include "kernels/htp_kernel_table.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

#define HTP__MESSAGE_SIZE 256

#if defined(__GNUC__)
#define HTP__PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define HTP__HIDDEN __attribute__((visibility("hidden")))
#else
#define HTP__PRINTF(fmt, args)
#define HTP__HIDDEN
#endif

/* The element types a collective sums: f32, or bf16 (htp_bf16) summed in
 * f32 and rounded once where the backend can (kernels/htp_bf16.h). */
typedef enum htp__elem { HTP__ELEM_F32, HTP__ELEM_BF16 } htp__elem;

static inline size_t htp__elem_size(htp__elem elem) {
  return elem == HTP__ELEM_BF16 ? sizeof(htp_bf16) : sizeof(float);
}

/* Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (addresses
 * compared as integers: the buffers may be unrelated objects). */
static inline int htp__overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

static inline const char *htp__allreduce_name(htp__elem elem) {
  return elem == HTP__ELEM_BF16 ? "htp_allreduce_sum_bf16" : "htp_allreduce_sum_f32";
}

/* What an all-reduce adds to its sum and computes from it, in place of the
 * replicated ops after it (htp_allreduce_sum_bias_residual_*,
 * htp_allreduce_sum_norm_*): sum + bias (a [cols] row on each row) +
 * residual, either NULL, then, where normed is not NULL, the layer norm of
 * that into normed. With `replicated` there is no sum: send is a value every
 * rank holds alike, no bias or residual, and only its norm is shared
 * (htp_group_layer_norm_*; recv NULL). */
typedef struct htp__epilogue {
  const void *bias, *residual;
  const void *norm_weight, *norm_bias;
  void *normed;
  float epsilon;
  int replicated;
} htp__epilogue;

static inline const char *htp__group_layer_norm_name(htp__elem elem) {
  return elem == HTP__ELEM_BF16 ? "htp_group_layer_norm_bf16" : "htp_group_layer_norm_f32";
}

static inline const char *htp__allreduce_epilogue_name(htp__elem elem, int normed) {
  if (normed)
    return elem == HTP__ELEM_BF16 ? "htp_allreduce_sum_norm_bf16" : "htp_allreduce_sum_norm_f32";
  return elem == HTP__ELEM_BF16 ? "htp_allreduce_sum_bias_residual_bf16"
                                : "htp_allreduce_sum_bias_residual_f32";
}

/* The call an epilogue belongs to, for messages and the profile. */
static inline const char *htp__epilogue_name(htp__elem elem, const htp__epilogue *epilogue) {
  return epilogue->replicated ? htp__group_layer_norm_name(elem)
                              : htp__allreduce_epilogue_name(elem, epilogue->normed != NULL);
}

/* Which memory a collective's buffers are in (ctx.c check_space): the
 * context's device memory (the public collectives; on the CPU, host
 * memory), or host memory whatever the device (control traffic). */
typedef enum htp__space { HTP__SPACE_DEVICE, HTP__SPACE_HOST } htp__space;

/* The collectives, as ranks must call them alike (comm_args.c). */
typedef enum htp__collective {
  HTP__OP_ALLREDUCE = 1,
  HTP__OP_ALLREDUCE_BF16,
  HTP__OP_ALLREDUCE_BIAS_RESIDUAL, /* local: chunked by rows, must not meet an all-reduce */
  HTP__OP_ALLREDUCE_BIAS_RESIDUAL_BF16,
  HTP__OP_ALLREDUCE_NORM, /* and the norm's rows copied too */
  HTP__OP_ALLREDUCE_NORM_BF16,
  HTP__OP_GROUP_LAYER_NORM, /* no sum: each rank's rows of its own input, normalised */
  HTP__OP_GROUP_LAYER_NORM_BF16,
  HTP__OP_ALLGATHER,
  HTP__OP_BROADCAST,
  HTP__OP_BARRIER
} htp__collective;

/* What one rank passes to a collective that every rank must pass alike.
 * The local backend compares them at its rendezvous; a backend without one
 * (mpi) gathers them before any data moves (htp__backend_ops.agree), so a
 * rank calling another collective, count or epilogue than its peers is an
 * error on every rank, not a hang or a sum of unlike buffers. */
typedef struct htp__collective_args {
  htp__collective op;
  size_t count; /* elements or bytes */
  size_t cols;  /* an epilogue's row length, else 0 */
  int root;
  htp__space space;
  unsigned parts; /* an epilogue's operands given (HTP__PART_*) */
  float epsilon;  /* an epilogue's norm epsilon, else 0 */
} htp__collective_args;

enum { HTP__PART_BIAS = 1, HTP__PART_RESIDUAL = 2, HTP__PART_NORM_WEIGHT = 4, HTP__PART_NORM_BIAS = 8 };

HTP__HIDDEN const char *htp__collective_name(htp__collective op);
/* The all-reduce of elem with epilogue (NULL: the plain sum), or the group
 * layer norm (epilogue->replicated). */
HTP__HIDDEN htp__collective htp__allreduce_collective(htp__elem elem, const htp__epilogue *epilogue);
HTP__HIDDEN htp__collective_args htp__collective_args_of(htp__collective op, htp__space space,
                                                         size_t count, size_t cols, int root,
                                                         const htp__epilogue *epilogue);
/* 0 where other (rank's) equals first (rank 0's); else 1 with why in
 * message. */
HTP__HIDDEN int htp__collective_mismatch(const htp__collective_args *first, int rank,
                                         const htp__collective_args *other, char *message,
                                         size_t size);

typedef struct htp__backend_ops {
  const char *name;
  /* Sets world->size and world->process_rank, allocates world->backend. May
   * write why it failed into message. */
  htp_result (*world_init)(htp_world *world, char *message, size_t message_size);
  void (*world_destroy)(htp_world *world);
  htp_result (*ctx_init)(htp_ctx *ctx);
  void (*ctx_destroy)(htp_ctx *ctx);
  /* Collectives: arguments are already checked by the core. */
  htp_result (*allreduce_sum)(htp_ctx *ctx, htp__elem elem, const void *send, void *recv,
                              size_t count, double deadline);
  /* The sum of rows x cols elements in recv, then its epilogue (the bias,
   * residual and norm weights are the same on every rank); with the
   * epilogue's `replicated`, send's norm alone, shared (recv NULL). NULL:
   * the core runs the epilogue over the whole sum after allreduce_sum
   * (htp__epilogue_rows), and every rank normalises the whole of a
   * replicated value itself. */
  htp_result (*allreduce_sum_epilogue)(htp_ctx *ctx, htp__elem elem, const void *send,
                                       void *recv, int64_t rows, int64_t cols,
                                       const htp__epilogue *epilogue, double deadline);
  /* allreduce_sum moves device memory; the others the space they are
   * given (the public collectives: device; the runtime's control traffic:
   * host). */
  htp_result (*allgather)(htp_ctx *ctx, htp__space space, const void *send, void *recv,
                          size_t bytes, double deadline);
  htp_result (*broadcast)(htp_ctx *ctx, htp__space space, void *buffer, size_t bytes, int root,
                          double deadline);
  htp_result (*send)(htp_ctx *ctx, htp__space space, const void *buffer, size_t bytes, int peer,
                     int tag, double deadline);
  htp_result (*recv)(htp_ctx *ctx, htp__space space, void *buffer, size_t bytes, int peer,
                     int tag, double deadline);
  htp_result (*barrier)(htp_ctx *ctx, double deadline);
  /* Compares what every rank passes to the collective it is about to run,
   * before the core calls it (NULL: local compares them at its rendezvous;
   * nccl does not compare them yet). A
   * mismatch fails the world with HTP_ERR_INVALID, on every rank alike. */
  htp_result (*agree)(htp_ctx *ctx, const htp__collective_args *args, double deadline);
  /* Called once, right after the world was marked failed: wake local waiters,
   * tell remote peers. Must not block. ctx may be NULL (no calling rank). */
  void (*notify_failure)(htp_world *world, htp_ctx *ctx);
  /* Block until the world fails or the deadline passes (fault injection's
   * delay and hang). Returns HTP_OK at the deadline, else the failure. */
  htp_result (*wait_failure)(htp_ctx *ctx, double deadline);
  /* htp_world_shrink (NULL: the backend cannot): world_init for a world of
   * the live processes of `parent`, which lost some: the old ranks gone in
   * lost[] (at most capacity), their count in *num_lost. */
  htp_result (*shrink_init)(htp_world *world, htp_world *parent, int32_t *lost, int capacity,
                            int *num_lost, char *message, size_t message_size);
  /* Standby processes (htp.h: htp_world_standby_wait and the rest; NULL:
   * the backend has none). Called with a world of this backend. */
  int (*is_standby)(const htp_world *world);
  htp_result (*standby_wait)(htp_world *world, htp_world **joined);
  htp_result (*grow)(htp_world *world, int32_t rank, htp_world **grown);
  htp_result (*release_standbys)(htp_world *world);
  /* config.fence (mpi): its clock stops until the process's next wait ends
   * (htp_world_fence_rest). May be NULL: nothing to stop. */
  void (*fence_rest)(htp_world *world);
} htp__backend_ops;

struct htp_world {
  htp_config config;
  const htp__backend_ops *ops;
  int size;
  int process_rank; /* -1 for local */

  pthread_mutex_t lock;       /* guards everything below except fail_code */
  unsigned char *rank_taken;  /* [size]: a context exists for the rank */
  htp_fault *faults;
  int fault_count, fault_capacity;
  int32_t *sm_counts; /* the world's copy of config.sm_counts, or NULL */
  /* SMs of the GPU the ranks share (the first context's device asked), 0
   * unknown: what a rank not given a partition (sm_counts 0) shares with
   * the others left out, for the all-reduce's chunks. Set once. */
  atomic_int device_sms;

  /* 0 while healthy; else the htp_result that failed it. */
  atomic_int fail_code;
  atomic_int fail_origin; /* rank that failed it; -1: every rank saw it */
  char fail_message[HTP__MESSAGE_SIZE];

  void *backend;
};

struct htp_ctx {
  htp_world *world;
  int rank;
  int device;        /* CUDA device of the rank, -1 on CPU */
  void *cuda_stream; /* cudaStream_t of the rank (nccl), NULL otherwise */
  char last_error[HTP__MESSAGE_SIZE];
  uint64_t error_count; /* failures recorded on the context (htp_ctx_error_count) */
  void *backend;
  double comm_seconds; /* inside collectives and transfers (htp_ctx_comm_seconds) */
  void *balancer;      /* htp_balancer attached by balancer.c, or NULL */
  /* The rank's kernel table and its environment (ctx.c, htp_config.device);
   * every op entry point and hook computes through them (ops.c). */
  const htp_kernel_table *kernels;
  htp_kernel_env kernel_env;
  char kernel_error[HTP__MESSAGE_SIZE]; /* the environment's error buffer */
  struct htp__profile *profile;         /* htp_ctx_profile_start's record, or NULL */
};


/* Records the message on ctx and returns code (convenient in return). */
HTP__HIDDEN htp_result htp__ctx_error(htp_ctx *ctx, htp_result code, const char *format, ...)
    HTP__PRINTF(3, 4);
/* Marks the world failed (the first failure wins) and calls notify_failure.
 * origin is the rank that failed it, or -1 when every rank sees the same
 * failure (a count mismatch). */
/* A bad argument of a call this rank's peers wait behind (an op, a hook, a
 * collective: they are, or soon will be, in a collective this rank would
 * not reach): its message and a failed world, so the peers stop at once
 * rather than at their deadline; without ctx just the code. The runtime's
 * one such check. */
#define HTP__INVALID_IF(ctx, condition, ...)                                                   \
  do {                                                                                         \
    if (condition)                                                                             \
      return (ctx) ? htp__fail((ctx), HTP_ERR_INVALID, __VA_ARGS__) : HTP_ERR_INVALID;        \
  } while (0)

/* Sets htp_world_last_error for the calling thread (per thread, like errno). */
HTP__HIDDEN void htp__world_message(const htp_world *world, const char *format, ...)
    HTP__PRINTF(2, 3);
HTP__HIDDEN void htp__world_fail(htp_world *world, htp_ctx *ctx, htp_result code, int origin,
                                 const char *format, ...) HTP__PRINTF(5, 6);
/* What a failed world means for rank: TIMEOUT stays TIMEOUT everywhere; a
 * failure that started on another rank is HTP_ERR_REMOTE; HTP_OK if healthy. */
HTP__HIDDEN htp_result htp__world_failure_for(const htp_world *world, int rank);
/* The world fails here without a notice to its peers: each of them finds
 * the same failure itself (the mpi backend's agreement on a call, where a
 * notice would overtake a peer still gathering and tell it less). */
HTP__HIDDEN void htp__world_fail_alike(htp_world *world, htp_ctx *ctx, htp_result code,
                                       const char *format, ...) HTP__PRINTF(4, 5);
/* The epilogue on rows [first, first + rows) of the sum in recv (the
 * residual's and normed's same rows), on the context's kernel table: the
 * adds (one pass where it has the fused entry), then the norm. */
HTP__HIDDEN htp_result htp__epilogue_rows(htp_ctx *ctx, htp__elem elem,
                                         const htp__epilogue *epilogue, void *recv,
                                         int64_t first, int64_t rows, int64_t cols);
/* The local all-reduce's split of count elements over size ranks: rank's
 * chunk [*begin, *end), in proportion to the ranks' SMs where they
 * partition one GPU of device_sms SMs (sm_counts; a rank given none, 0,
 * counts as an equal share of the SMs no partition holds), else equal
 * (sm_counts NULL, no partition, or device_sms 0 beside a 0), each chunk's
 * start a multiple of align (whole lines). The same on every rank; the
 * chunks tile [0, count). */
HTP__HIDDEN void htp__allreduce_chunk(size_t count, int size, const int32_t *sm_counts,
                                      int device_sms, int rank, size_t align, size_t *begin,
                                      size_t *end);
/* A failure found by a backend on ctx: fails the world and records the
 * message on ctx. Returns code. */
HTP__HIDDEN htp_result htp__fail(htp_ctx *ctx, htp_result code, const char *format, ...)
    HTP__PRINTF(3, 4);
/* Returns the failure as seen by ctx with a message, or HTP_OK. */
HTP__HIDDEN htp_result htp__check_failed(htp_ctx *ctx, const char *what);

/* The kernel table and environment ctx computes through; for a NULL ctx
 * the CPU table and an environment without an error buffer (ops.c). */
HTP__HIDDEN const htp_kernel_table *htp__kernel_table(const htp_ctx *ctx);
HTP__HIDDEN const htp_kernel_env *htp__kernel_env(const htp_ctx *ctx);
/* A failed kernel entry: records "what: why" on ctx (why from the
 * environment's error buffer) and fails the world, as a failing hook does;
 * without ctx just returns the status. */
HTP__HIDDEN htp_result htp__kernel_failed(htp_ctx *ctx, htp_kernel_status status,
                                          const char *what);

/* The runtime's control traffic (DESIGN §10) runs over the host world with
 * the public host twins of the collectives: htp_allgather_host,
 * htp_send_host, htp_recv_host (runtime/htp.h). */
/* Whether buffers of `space` are a device's memory the host cannot read
 * (a GPU's, the checked device's): backends then copy through the kernel
 * table instead of memcpy. */
HTP__HIDDEN int htp__space_on_device(const htp_ctx *ctx, htp__space space);
/* host <- src and dst <- host, src/dst in `space` (to_host / to_device on
 * a device, memcpy otherwise); a failure fails the world, naming what. */
HTP__HIDDEN htp_result htp__space_to_host(htp_ctx *ctx, htp__space space, void *host,
                                          const void *src, size_t bytes, const char *what);
HTP__HIDDEN htp_result htp__space_from_host(htp_ctx *ctx, htp__space space, void *dst,
                                            const void *host, size_t bytes, const char *what);

/* htp_ctx_mark / htp_ctx_elapsed on one of the environment's timers
 * (HTP_KERNEL_TIMER_CALLER is the public one's; the balance hooks time
 * themselves on HTP_KERNEL_TIMER_HOOKS, inside the caller's span). */
HTP__HIDDEN htp_result htp__ctx_mark_timer(htp_ctx *ctx, int timer, int which);
HTP__HIDDEN htp_result htp__ctx_elapsed_timer(htp_ctx *ctx, int timer, double *seconds);

/* Absolute CLOCK_MONOTONIC time for pthread_cond_timedwait. */
HTP__HIDDEN struct timespec htp__timespec(double seconds);
/* Sleeps min(seconds, deadline - now); never negative. */
HTP__HIDDEN void htp__sleep(double seconds);

HTP__HIDDEN extern const htp__backend_ops htp__local_ops;
#ifdef HTP_HAVE_MPI
HTP__HIDDEN extern const htp__backend_ops htp__mpi_ops;
/* comm_mpi.c: htp_world_is_standby, _standby_wait, _grow, _release_standbys. */
#endif
#ifdef HTP_HAVE_NCCL
HTP__HIDDEN extern const htp__backend_ops htp__nccl_ops;
#endif

/* The nccl backend's placement (comm_nccl.c; defined where NCCL is built):
 * each rank's host name and its GPU's PCI bus id, gathered over the host
 * world. local_index: how many lower ranks share rank's host (its GPU on
 * that host); shared_gpu: the lowest other rank on the same host and bus
 * (NCCL cannot run two ranks on one GPU), or -1. */
typedef struct htp__nccl_place {
  char host[64];
  char bus[32];
} htp__nccl_place;
HTP__HIDDEN int htp__nccl_local_index(const htp__nccl_place *places, int size, int rank);
HTP__HIDDEN int htp__nccl_shared_gpu(const htp__nccl_place *places, int size, int rank);

/* Helpers for nested worlds: the nccl backend bootstraps its unique id over a
 * local or MPI world of its own. */
/* A world like `like` (its config and backend) whose backend state init
 * makes from arg (the mpi backend's grown worlds). */
HTP__HIDDEN htp_result htp__world_adopt(const htp_world *like,
                                        htp_result (*init)(htp_world *, void *, char *, size_t),
                                        void *arg, htp_world **world_out, char *message,
                                        size_t message_size);
HTP__HIDDEN htp_result htp__world_create_backend(const htp_config *config,
                                                 const htp__backend_ops *ops, htp_world **world,
                                                 char *message, size_t message_size);

#endif /* HTP_COMM_INTERNAL_H */
