/*===- runtime/htp.h - libhtprt, the HTP runtime: the one public header ---===*
 *
 * libhtprt runs tensor-parallel blocks on ranks whose speeds differ: it owns
 * the communicators (local threads, MPI processes, NCCL GPUs), puts a deadline
 * on every wait, measures each rank, detects stragglers and plans the
 * SEMI-migration policy (DESIGN §4-5). Everything else in runtime/ is private.
 *
 * Conventions: every function returns an htp_result (HTP_OK = 0) unless said
 * otherwise; on failure the context's last error (htp_last_error) says why.
 * No global state: several worlds may live in one process, each with its own
 * backend state, faults and failure. Objects are paired create/destroy;
 * destroy accepts NULL. Link: libhtprt.a plus pthreads (and, when built in,
 * MPI::MPI_C, CUDA::cudart and libnccl: the CMake target `htprt` carries
 * them).
 *
 * Threads: a world may be used by many threads (the local backend's ranks);
 * a context belongs to its rank's thread, except htp_abort, which any thread
 * may call. Nothing here blocks forever: every wait ends at its deadline.
 *
 * Two regions have two owners:
 *   - everything outside the PLANNING region: contexts, results, comm
 *     backends, deadlines, faults (runtime core);
 *   - the PLANNING region: detection, SEMI planning, unit tables, imputation,
 *     migration transfers, trace (planner).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_H
#define HTP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes: 0 is success; every other value has a string (htp_strerror). */
typedef enum htp_result {
  HTP_OK = 0,
  HTP_ERR_INVALID = 1,   /* bad argument; the context's last error says which */
  HTP_ERR_NOMEM = 2,
  HTP_ERR_TIMEOUT = 3,   /* a deadline passed: a peer hung or is too slow */
  HTP_ERR_REMOTE = 4,    /* a peer failed or aborted */
  HTP_ERR_SYSTEM = 5,    /* the OS, MPI, CUDA or NCCL failed */
  HTP_ERR_UNSUPPORTED = 6,
  HTP_ERR_INTERNAL = 7,
  HTP_RESULT_COUNT
} htp_result;

/* A static string for every value (never NULL; "unknown result code" for a
 * value out of range). Thread safe. */
const char *htp_strerror(htp_result result);

/* ===== Worlds and contexts ============================================= */

typedef enum htp_backend {
  HTP_BACKEND_LOCAL = 0, /* ranks are threads of this process (default) */
  HTP_BACKEND_MPI = 1,   /* one process per rank, Open MPI */
  HTP_BACKEND_NCCL = 2   /* one GPU per rank; id bootstrapped over MPI or local */
} htp_backend;

/* A world is the group of ranks. With the local backend one world object is
 * shared by all rank threads; with MPI/NCCL each process creates its own and
 * the size comes from MPI.
 *
 * Backends:
 *   local  world_size threads, one htp_world. Sums are taken in rank order:
 *          bitwise reproducible, identical on every rank.
 *   mpi    one process per rank (mpirun). world_size 0 (or MPI's size) means
 *          MPI_COMM_WORLD. htp_world_create calls MPI_Init_thread if MPI is
 *          not initialized yet and then owns MPI_Finalize. Each world works on
 *          duplicates of MPI_COMM_WORLD, so worlds do not interfere. The sum
 *          is MPI_Iallreduce: NOT guaranteed bitwise reproducible or in rank
 *          order (it depends on Open MPI's algorithm). Waits poll MPI_Test
 *          against the deadline. A failed world does not call MPI_Finalize
 *          (it could hang on the dead peer): htp_world_destroy then calls
 *          MPI_Abort(MPI_COMM_WORLD, 1), which ends every process of the job
 *          with a non-zero status; report before destroying.
 *   nccl   one GPU per rank, rank r on device r (modulo the device count).
 *          world_size >= 1: the ranks are threads of this process, and the
 *          NCCL unique id travels over a local world; world_size 0: one
 *          process per rank under mpirun, id over MPI. Buffers passed to the
 *          collectives and transfers are DEVICE pointers; each call enqueues
 *          on the rank's stream (htp_ctx_cuda_stream) and returns when the
 *          operation finished, or at the deadline (the communicator is then
 *          aborted with ncclCommAbort). */
typedef struct htp_world htp_world;
typedef struct htp_ctx htp_ctx; /* one per rank */

#define HTP_CONFIG_MAGIC 0x48545031u /* "HTP1" */
/* New fields go at the end only. A config not started from
 * HTP_CONFIG_INITIALIZER is rejected (magic). */
typedef struct htp_config {
  uint32_t magic;
  htp_backend backend;  /* default HTP_BACKEND_LOCAL */
  int world_size;       /* local: number of ranks (>= 1); mpi/nccl: 0 = from MPI */
  double timeout_s;     /* deadline of every blocking wait, in (0, 1e7]; default 60 s */
} htp_config;
#define HTP_CONFIG_INITIALIZER {HTP_CONFIG_MAGIC, HTP_BACKEND_LOCAL, 1, 60.0}

/* Creates a world from *config (copied; the caller keeps config). *world is
 * set to NULL on failure. Errors: HTP_ERR_INVALID (NULL pointer, bad magic,
 * unknown backend, world_size < 1 for local or < 0, timeout_s out of range,
 * mpi world_size different from MPI's), HTP_ERR_UNSUPPORTED (backend not
 * built in), HTP_ERR_SYSTEM (MPI/CUDA/NCCL failed), HTP_ERR_NOMEM. There is
 * no context yet to hold a message: htp_world_create_verbose writes it. */
htp_result htp_world_create(const htp_config *config, htp_world **world);
/* htp_world_create that also writes why it failed into message (at most
 * message_size bytes, NUL-terminated; "" on success). message may be NULL. */
htp_result htp_world_create_verbose(const htp_config *config, htp_world **world,
                                    char *message, size_t message_size);
/* 1 if the backend was built into this library, else 0. */
int htp_backend_available(htp_backend backend);
/* Destroy after every context of the world was destroyed (local: after the
 * rank threads were joined). Never blocks on a peer; see the mpi notes above
 * for what it does with a failed MPI world. */
void htp_world_destroy(htp_world *world);
int htp_world_size(const htp_world *world);
/* The calling process's rank for mpi (and nccl over MPI); -1 for local (and
 * nccl over threads). */
int htp_world_process_rank(const htp_world *world);
htp_backend htp_world_backend(const htp_world *world);
/* HTP_OK while the world is healthy, else the result that failed it (as seen
 * by the rank that failed it). Thread safe. */
htp_result htp_world_status(const htp_world *world);
/* The message of the last failed world-level call (htp_ctx_create,
 * htp_world_add_fault) on this world; "" if none. Valid until the next such
 * call; not synchronized with concurrent failing calls. */
const char *htp_world_last_error(const htp_world *world);

/* One context per rank. Local: call from the rank's own thread, rank in
 * [0, size); mpi/nccl: rank must be htp_world_process_rank() (nccl over
 * threads: any rank in [0, size), from the thread that drives that GPU; it
 * calls cudaSetDevice). Collectives block until every rank has created its
 * context or the deadline passes. Errors (message in htp_world_last_error):
 * HTP_ERR_INVALID for NULL pointers, a rank out of range, not this process's
 * rank, or a rank that already has a context; HTP_ERR_SYSTEM, HTP_ERR_TIMEOUT
 * (nccl communicator setup). */
htp_result htp_ctx_create(htp_world *world, int rank, htp_ctx **ctx);
/* Frees the context (NULL is fine); the rank may then get a new one. */
void htp_ctx_destroy(htp_ctx *ctx);
int htp_ctx_rank(const htp_ctx *ctx);
int htp_ctx_size(const htp_ctx *ctx);
htp_world *htp_ctx_world(const htp_ctx *ctx);
/* CUDA device of the rank (nccl), -1 on CPU backends. */
int htp_ctx_device(const htp_ctx *ctx);
/* The rank's cudaStream_t (nccl; the caller may enqueue compute on it), NULL
 * on CPU backends. Owned by the context. */
void *htp_ctx_cuda_stream(const htp_ctx *ctx);
/* The message of the last failure on this context ("" if none; never NULL).
 * Successful calls keep it. Valid until the next call on ctx. */
const char *htp_last_error(const htp_ctx *ctx);

/* ===== Collectives and transfers ======================================== *
 * Every rank calls each collective in the same order with the same count.
 * Each returns within the deadline: HTP_ERR_TIMEOUT when a peer does not
 * arrive in time, HTP_ERR_REMOTE when a peer aborted or died. After an error
 * the world is unusable (every later call fails fast).
 *
 * Errors shared by all of them:
 *   HTP_ERR_INVALID  ctx NULL (no message then); a NULL buffer with a nonzero
 *                    size; root/peer out of range; send or recv to oneself;
 *                    a negative tag. A rank that passes bad arguments fails
 *                    the world, so its peers get HTP_ERR_REMOTE at once
 *                    instead of at the deadline. Mismatches the backend can
 *                    see (local: different collectives, counts or roots on
 *                    different ranks; send/recv sizes) give HTP_ERR_INVALID on
 *                    every rank involved.
 *   HTP_ERR_TIMEOUT  a deadline (config.timeout_s from the call) passed: on
 *                    the rank that waited and on every rank it tells.
 *   HTP_ERR_REMOTE   another rank aborted, died, or passed bad arguments.
 *   HTP_ERR_SYSTEM   MPI/CUDA/NCCL reported an error.
 * Buffers stay owned by the caller and must stay valid until the call
 * returns; when it returns, the operation is complete (also on nccl). Host
 * pointers for local/mpi, device pointers for nccl. */

/* recv[i] = sum over ranks of send[i], count floats. recv may equal send (in
 * place); otherwise they must not overlap. The sum is taken in rank order
 * (local, nccl-over-threads uses NCCL's own order), so local results are
 * bitwise reproducible; see the backend notes for mpi. */
htp_result htp_allreduce_sum_f32(htp_ctx *ctx, const float *send, float *recv, size_t count);
/* recv holds size * bytes; rank r's send lands at recv + r * bytes. send may
 * be exactly recv + rank * bytes (in place); otherwise no overlap. */
htp_result htp_allgather(htp_ctx *ctx, const void *send, void *recv, size_t bytes);
/* Copies root's buffer into every other rank's buffer; root in [0, size),
 * the same on every rank. */
htp_result htp_broadcast(htp_ctx *ctx, void *buffer, size_t bytes, int root);
/* Point to point, for migration: send blocks until recv took the bytes (or
 * the deadline). tag (>= 0) separates concurrent streams between the same
 * pair; messages with the same peer and tag arrive in order. Sizes must
 * match (the local backend reports a mismatch as HTP_ERR_INVALID to both). */
htp_result htp_send(htp_ctx *ctx, const void *buffer, size_t bytes, int peer, int tag);
htp_result htp_recv(htp_ctx *ctx, void *buffer, size_t bytes, int peer, int tag);
htp_result htp_barrier(htp_ctx *ctx);
/* Marks the world failed; every peer's pending and later waits return
 * HTP_ERR_REMOTE (this rank's later calls return reason; HTP_ERR_TIMEOUT as a
 * reason is reported as such everywhere; HTP_OK becomes HTP_ERR_REMOTE).
 * Safe to call from any thread, any rank, more than once (the first failure
 * wins). On mpi the peers are told by a message; on nccl the communicator is
 * aborted. */
void htp_abort(htp_ctx *ctx, htp_result reason);

/* ===== Fault injection (tests and experiments) ========================== */

typedef enum htp_fault_kind {
  HTP_FAULT_NONE = 0,
  HTP_FAULT_DELAY = 1, /* sleep `seconds` at each fault point from `iteration` on */
  HTP_FAULT_HANG = 2,  /* stop answering from `iteration` on (until aborted) */
  HTP_FAULT_DIE = 3    /* the rank fails at `iteration`: its context aborts */
} htp_fault_kind;

typedef struct htp_fault {
  htp_fault_kind kind;
  int rank;          /* in [0, world size) */
  int64_t iteration; /* >= 0 */
  double seconds;    /* delay: > 0; hang: its longest duration, 0 = ten
                      * deadlines (then the hung rank fails the world with
                      * HTP_ERR_TIMEOUT itself); die: unused */
} htp_fault;

/* Registers a copy of *fault on the world (before the ranks start; with
 * mpi/nccl-over-MPI every process registers the same faults). Several faults
 * may target one rank; at a fault point the first registered one that is due
 * applies. HTP_ERR_INVALID (message in htp_world_last_error) for a NULL
 * pointer, an unknown kind, a rank out of range, a negative iteration, a
 * delay without seconds. */
htp_result htp_world_add_fault(htp_world *world, const htp_fault *fault);
/* Called by the rank once per iteration: applies any fault due at
 * `iteration`. Returns HTP_ERR_REMOTE for a rank that was made to die or hang
 * and was released by an abort. A delay ends early, with the failure, if the
 * world fails meanwhile. Fails fast on a failed world. */
htp_result htp_fault_point(htp_ctx *ctx, int64_t iteration);

/* Monotonic seconds (CLOCK_MONOTONIC), for timing compute. Thread safe. */
double htp_now(void);

/* ===== PLANNING region begin (detection, SEMI planning, unit tables) ===== */
/* ===== PLANNING region end ===== */

#ifdef __cplusplus
}
#endif

#endif /* HTP_H */
