/*===- runtime/htp.h - libhtprt, the HTP runtime: the embedding API -------===*
 *
 * libhtprt runs tensor-parallel blocks on ranks whose speeds differ: it owns
 * the communicators (local threads, MPI processes, NCCL GPUs), puts a deadline
 * on every wait, measures each rank, detects stragglers and plans the
 * SEMI-migration policy (DESIGN §4-5).
 *
 * Public headers, by audience:
 *   runtime/htp.h        this one: the embedding API, for a program that
 *                        creates worlds and contexts and drives the planner
 *                        and the balancer (htp-run, htp-sim, tests).
 *   runtime/htp_entry.h  what a compiled block exports (entry symbol,
 *                        signature, facts) and the signature reader.
 *   runtime/htp_ops.h    what a compiled block calls by name: the op entry
 *                        points (htp_op_*) and the balance hooks (htp_rt_*).
 * Everything else in runtime/ is private.
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
 * Sections, in order: results; worlds and contexts; collectives and
 * transfers; fault injection; planning (pairs and units, detection, SEMI
 * plans, selection and imputation choices); the balancer (its configuration,
 * per-iteration step and trace; the hooks it drives are in runtime/htp_ops.h);
 * device memory and timing.
 *
 * Only what the three public headers declare with HTP_API is exported from
 * libhtprt; every other symbol is hidden (-fvisibility=hidden), so a shared
 * build or an executable that exports libhtprt for JIT-compiled code exposes
 * exactly this API (the test runtime.visibility checks it).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_H
#define HTP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* FILE, for the balancer's trace */

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the exported API (here, in runtime/htp_entry.h and in
 * runtime/htp_ops.h). libhtprt is compiled with -fvisibility=hidden;
 * compiled blocks resolve htp_allreduce_sum_f32 and the functions of
 * runtime/htp_ops.h by name from the process (htp-run exports them), so
 * those must stay default-visibility. */
#if defined(__GNUC__) || defined(__clang__)
#define HTP_API __attribute__((visibility("default")))
#else
#define HTP_API
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
HTP_API const char *htp_strerror(htp_result result);

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
/* The device whose kernel table each context of the world owns (DESIGN
 * §6): every htp_op_* entry point and balance hook of a context
 * (runtime/htp_ops.h) computes through it. */
typedef enum htp_device {
  HTP_DEVICE_CPU = 0,  /* kernels/cpu (default) */
  HTP_DEVICE_CUDA = 1, /* kernels/cuda: buffers are then DEVICE pointers; only in builds
                        * with CUDA (else htp_world_create returns HTP_ERR_UNSUPPORTED) */
  HTP_DEVICE_CHECKED = 2 /* kernels/checked: the CPU's kernels behind a device's contracts
                          * (memory the host cannot touch, stream timing, CUDA scratch), to
                          * catch on the CPU what would fail on a GPU; every build */
} htp_device;

#define HTP_WORLD_MAX_SIZE 65536 /* ranks of one world */
typedef struct htp_config {
  uint32_t magic;
  htp_backend backend;  /* default HTP_BACKEND_LOCAL */
  int world_size;       /* local: number of ranks (1 to HTP_WORLD_MAX_SIZE); mpi/nccl:
                         * 0 = from MPI */
  double timeout_s;     /* deadline of every blocking wait, in (0, 1e7]; default 60 s */
  htp_device device;    /* kernel table of every context; default HTP_DEVICE_CPU. CUDA:
                         * the rank's device (nccl: the one it drives; else device 0) */
  /* SM partitions of one GPU (device CUDA or CHECKED, local backend only):
   * world_size entries, rank r's work confined to sm_counts[r] SMs (a green
   * context; whole partition steps, 8 on sm_90; the checked device counts
   * them alike), 0 = the whole device. Copied by htp_world_create. NULL
   * (default): no partitions. */
  const int32_t *sm_counts;
  /* mpi with ULFM: the last `standbys` processes of MPI_COMM_WORLD stay out
   * of the world, waiting in htp_world_standby_wait until htp_world_grow
   * takes one in or htp_world_release_standbys lets them go (default 0). */
  int standbys;
  /* The precision of every product with a weight (each linear's x·wᵀ, and
   * in training dy·w and dyᵀ·x), as PyTorch's float32 matmul precision: an
   * htp_matmul_precision of kernels/htp_kernel_table.h, HTP_MATMUL_F32 (0,
   * default, "highest"), HTP_MATMUL_TF32 ("high") or HTP_MATMUL_BF16
   * ("medium"): each operand rounded to that format, the products summed in
   * f32, on tensor cores or bf16 units where the device has them.
   * Attention's q·kᵀ and p·v and bf16 blocks are not affected. On the CPU
   * (and the checked device) it is process-wide, as the CPU's thread
   * count: worlds that exist at once should agree (the last created sets
   * it). */
  int32_t matmul_precision;
  /* mpi with ULFM, 1: a process that waits on no call of the world (no
   * collective, send, receive or meeting) for timeout_s since its last wait
   * ended is taken as hung and ends itself (a line on stderr, then SIGKILL,
   * as a killed process), so that its peers see a lost process and can
   * shrink it away (htp_world_shrink) instead of keeping a live one. The
   * clock starts at the end of the process's first wait on the world;
   * a process waiting for a hung peer is not the hung one. A --fault hang
   * (HTP_FAULT_HANG) in such a world is not released by the world's failure
   * (a stuck process would not be): the fence ends it. Default 0; another
   * backend, or an MPI without ULFM, is refused. */
  int fence;
} htp_config;
#define HTP_CONFIG_INITIALIZER                                                                 \
  {HTP_CONFIG_MAGIC, HTP_BACKEND_LOCAL, 1, 60.0, HTP_DEVICE_CPU, NULL, 0, 0, 0}

/* Creates a world from *config (copied; the caller keeps config). *world is
 * set to NULL on failure. Errors: HTP_ERR_INVALID (NULL pointer, bad magic,
 * unknown backend, world_size < 1 for local or < 0, or above
 * HTP_WORLD_MAX_SIZE (65536 ranks: a world keeps state per rank), timeout_s
 * out of range,
 * mpi world_size different from MPI's), HTP_ERR_UNSUPPORTED (backend not
 * built in), HTP_ERR_SYSTEM (MPI/CUDA/NCCL failed), HTP_ERR_NOMEM. There is
 * no context yet to hold a message: htp_world_create_verbose writes it. */
HTP_API htp_result htp_world_create(const htp_config *config, htp_world **world);
/* htp_world_create that also writes why it failed into message (at most
 * message_size bytes, NUL-terminated; "" on success). message may be NULL. */
HTP_API htp_result htp_world_create_verbose(const htp_config *config, htp_world **world,
                                    char *message, size_t message_size);
/* 1 if the backend was built into this library, else 0. */
HTP_API int htp_backend_available(htp_backend backend);
/* 1 if htp_world_shrink works on the backend's worlds as built (mpi against
 * an MPI with ULFM), else 0. */
HTP_API int htp_backend_can_shrink(htp_backend backend);
/* Destroy after every context of the world was destroyed (local: after the
 * rank threads were joined); a world with a context left is not freed (a
 * message on stderr, the memory leaks), so that context stays usable
 * rather than reading freed memory. Never blocks on a peer; see the mpi
 * notes above for what it does with a failed MPI world. */
HTP_API void htp_world_destroy(htp_world *world);
/* After processes of an mpi world died: a world of the live ones, ranks
 * renumbered in their old order, in *survivors; lost[] gets the old ranks
 * that are gone (at most `capacity`), *num_lost how many. Collective over
 * the survivors (each calls it once its calls on `world` failed); `world`
 * stays to be destroyed, which then does not wait for the dead. Needs
 * Open MPI's ULFM (built against an MPI with <mpi-ext.h>'s
 * MPIX_Comm_shrink, launched with `mpirun --with-ft ulfm`); elsewhere
 * HTP_ERR_UNSUPPORTED (a local world's threads cannot die alone: make a new
 * world). HTP_ERR_INVALID for NULL arguments. MPI's shrink takes no
 * deadline: a process still in it after config.timeout_s says so on stderr
 * and exits 1 (its peers see a death, not a hang); so do the meetings of
 * standby_wait, grow and release_standbys below. */
HTP_API htp_result htp_world_shrink(htp_world *world, htp_world **survivors, int32_t *lost,
                                    int capacity, int *num_lost);
/* Standby processes (config.standbys; mpi with ULFM, else
 * HTP_ERR_UNSUPPORTED). htp_world_create gives a standby process a world of
 * no ranks (is_standby 1), on which it calls standby_wait: collective with
 * the world's live processes and every live standby, it returns when the
 * world grows with a standby (this one: *joined is its new world, its rank
 * the one the growers chose; another: it waits again) or releases them
 * (*joined NULL). grow: collective over the world's live processes (each
 * calls it, with the same rank) and the standbys: a world of them and one
 * standby (the first by MPI_COMM_WORLD rank), which takes rank `rank`
 * (those at or above it move up one); HTP_ERR_REMOTE when no standby is
 * left. A standby waits for the world's call, a receive polled with sleeps
 * (no deadline: it ends with HTP_ERR_REMOTE once every process of the world
 * is dead). A standby's world reports the size of the world it waits
 * beside, process rank -1, and refuses contexts. release_standbys: the same
 * meeting, letting every standby go. HTP_ERR_SYSTEM when MPI fails (its
 * message in htp_world_last_error). */
HTP_API int htp_world_is_standby(const htp_world *world);
HTP_API htp_result htp_world_standby_wait(htp_world *world, htp_world **joined);
HTP_API htp_result htp_world_grow(htp_world *world, int32_t rank, htp_world **grown);
HTP_API htp_result htp_world_release_standbys(htp_world *world);
/* config.fence: this process's fence stops timing it until its next wait on
 * the world ends: for host work between two tasks that every process does
 * at once, with no call to wait in (putting a snapshot together after a
 * shrink, a new world's setup), which the fence must not take for a hang.
 * HTP_OK (nothing to do without a fence); HTP_ERR_INVALID for NULL. */
HTP_API htp_result htp_world_fence_rest(htp_world *world);
HTP_API int htp_world_size(const htp_world *world);
/* The calling process's rank for mpi (and nccl over MPI); -1 for local (and
 * nccl over threads). */
HTP_API int htp_world_process_rank(const htp_world *world);
HTP_API htp_backend htp_world_backend(const htp_world *world);
/* HTP_OK while the world is healthy, else the result that failed it (as seen
 * by the rank that failed it). Thread safe. */
HTP_API htp_result htp_world_status(const htp_world *world);
/* The message of this thread's last failed world-level call (htp_ctx_create,
 * htp_world_add_fault) on this world; "" if none. Per thread, like errno:
 * ranks that create their contexts concurrently each read their own. Valid
 * until this thread's next such call. */
HTP_API const char *htp_world_last_error(const htp_world *world);

/* One context per rank. Local: call from the rank's own thread, rank in
 * [0, size); mpi/nccl: rank must be htp_world_process_rank() (nccl over
 * threads: any rank in [0, size), from the thread that drives that GPU; it
 * calls cudaSetDevice). Collectives block until every rank has created its
 * context or the deadline passes. Errors (message in htp_world_last_error):
 * HTP_ERR_INVALID for NULL pointers, a rank out of range, not this process's
 * rank, or a rank that already has a context; HTP_ERR_SYSTEM, HTP_ERR_TIMEOUT
 * (nccl communicator setup, the device's kernels: a GPU or its SMs taken).
 * A context that fails past the argument checks fails the world, so that
 * peers waiting in a collective get HTP_ERR_REMOTE at once. */
HTP_API htp_result htp_ctx_create(htp_world *world, int rank, htp_ctx **ctx);
/* Frees the context (NULL is fine); the rank may then get a new one. A
 * context with a balancer still attached is not freed (said on stderr),
 * nor what it holds (its device environment, an SM partition: a later
 * world may find the SMs taken): destroy the balancer first. */
HTP_API void htp_ctx_destroy(htp_ctx *ctx);
HTP_API int htp_ctx_rank(const htp_ctx *ctx);
HTP_API int htp_ctx_size(const htp_ctx *ctx);
HTP_API htp_world *htp_ctx_world(const htp_ctx *ctx);
/* CUDA device of the rank (nccl), -1 on CPU backends. */
HTP_API int htp_ctx_device(const htp_ctx *ctx);
/* The rank's cudaStream_t (nccl; the caller may enqueue compute on it), NULL
 * on CPU backends. Owned by the context. */
HTP_API void *htp_ctx_cuda_stream(const htp_ctx *ctx);
/* The message of the last failure on this context ("" if none; never NULL).
 * Successful calls keep it. Valid until the next call on ctx. */
HTP_API const char *htp_last_error(const htp_ctx *ctx);
/* How many failures the context has recorded (0 for NULL): a caller that
 * reads it before and after a call knows whether htp_last_error is that
 * call's, even where the message repeats an older one. */
HTP_API uint64_t htp_ctx_error_count(const htp_ctx *ctx);

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
 * place); otherwise they must not overlap (refused). local: the sum is taken in rank
 * order, so results are bitwise reproducible and equal on every rank; mpi and
 * nccl use their library's order (see the backend notes). */
HTP_API htp_result htp_allreduce_sum_f32(htp_ctx *ctx, const float *send, float *recv, size_t count);
/* The same on bf16 tensors (uint16_t bit patterns): every rank's parts are
 * summed in f32 and rounded once to bf16 on the local and mpi backends
 * (mpi moves them as f32: twice the bytes); nccl sums bf16 natively, which
 * may round at each step of its ring when tp > 2. */
HTP_API htp_result htp_allreduce_sum_bf16(htp_ctx *ctx, const uint16_t *send, uint16_t *recv,
                                          size_t count);
/* The sum of htp_allreduce_sum_f32 over rows * cols elements, then
 * + bias (a [cols] row added to every row) + residual ([rows, cols]) in
 * recv: a row-parallel layer's bias and residual after its all-reduce.
 * bias or residual may be NULL (not added). Both are replicated values,
 * the same on every rank, as tensor parallelism keeps them: the local
 * backend adds rank k's to the rows rank k sums (ranks sharing a device
 * each take a part instead of each passing over the whole sum again); mpi
 * and nccl add each rank's own over the whole sum after it. residual must
 * not overlap recv. The adds' time counts as communication on the local
 * backend (they run inside it), as compute on the others. */
HTP_API htp_result htp_allreduce_sum_bias_residual_f32(htp_ctx *ctx, const float *send,
                                                       const float *bias, const float *residual,
                                                       float *recv, int64_t rows, int64_t cols);
/* The same on bf16 tensors: the sum rounded once, then the adds as
 * htp_op_bias_add_residual_bf16 (summed in f32, rounded once). */
HTP_API htp_result htp_allreduce_sum_bias_residual_bf16(htp_ctx *ctx, const uint16_t *send,
                                                        const uint16_t *bias,
                                                        const uint16_t *residual, uint16_t *recv,
                                                        int64_t rows, int64_t cols);
/* The sum of htp_allreduce_sum_bias_residual_f32 (bias and residual may
 * be NULL) in sum, then its layer norm (weight and norm_bias [cols],
 * epsilon > 0, as htp_op_layer_norm_f32) in normed: a row-parallel
 * layer's total and the next half-layer's norm of it. The local backend
 * normalises the rows each rank sums, mpi and nccl the whole sum on every
 * rank. normed overlaps none of send, sum, residual, the bias and the norm
 * weights; none of those overlaps sum either. The norm's time counts as the
 * adds' does. */
HTP_API htp_result htp_allreduce_sum_norm_f32(htp_ctx *ctx, const float *send, const float *bias,
                                              const float *residual, float *sum,
                                              const float *weight, const float *norm_bias,
                                              float *normed, int64_t rows, int64_t cols,
                                              float epsilon);
/* The same on bf16 tensors: the sum and its adds as
 * htp_allreduce_sum_bias_residual_bf16, the norm as htp_op_layer_norm_bf16. */
HTP_API htp_result htp_allreduce_sum_norm_bf16(htp_ctx *ctx, const uint16_t *send,
                                               const uint16_t *bias, const uint16_t *residual,
                                               uint16_t *sum, const uint16_t *weight,
                                               const uint16_t *norm_bias, uint16_t *normed,
                                               int64_t rows, int64_t cols, float epsilon);
/* The layer norm of x (as htp_op_layer_norm_f32: weight and bias [cols],
 * epsilon > 0) into y, where x is the same on every rank (a tensor-parallel
 * block's input): a collective. The local backend splits the rows among the
 * ranks as the sums of htp_allreduce_sum_norm_f32 (in proportion to their
 * SMs on one GPU), each normalising its rows and copying them to the
 * others, instead of each normalising all of x; on one rank, mpi and nccl
 * each rank normalises all of x itself (mpi first checks that the ranks
 * made the same call: one small all-gather). y overlaps
 * none of x, weight and bias; the result is htp_op_layer_norm_f32's, bit
 * for bit.
 * Its time counts as communication, as the sums' norms do. */
HTP_API htp_result htp_group_layer_norm_f32(htp_ctx *ctx, const float *x, const float *weight,
                                            const float *bias, float *y, int64_t rows,
                                            int64_t cols, float epsilon);
/* The same on bf16 tensors, as htp_op_layer_norm_bf16. */
HTP_API htp_result htp_group_layer_norm_bf16(htp_ctx *ctx, const uint16_t *x,
                                             const uint16_t *weight, const uint16_t *bias,
                                             uint16_t *y, int64_t rows, int64_t cols,
                                             float epsilon);
/* recv holds size * bytes; rank r's send lands at recv + r * bytes. send may
 * be exactly recv + rank * bytes (in place); another overlap is refused. */
HTP_API htp_result htp_allgather(htp_ctx *ctx, const void *send, void *recv, size_t bytes);
/* The same on host memory whatever the device, over the host world: control
 * values (timings, counts), which on a GPU would otherwise need a device
 * copy each way. */
HTP_API htp_result htp_allgather_host(htp_ctx *ctx, const void *send, void *recv, size_t bytes);
/* Copies root's buffer into every other rank's buffer; root in [0, size),
 * the same on every rank. */
HTP_API htp_result htp_broadcast(htp_ctx *ctx, void *buffer, size_t bytes, int root);
/* Point to point, for migration: send blocks until recv took the bytes (or
 * the deadline). tag (>= 0) separates concurrent streams between the same
 * pair; messages with the same peer and tag arrive in order. Sizes must
 * match (the local backend reports a mismatch as HTP_ERR_INVALID to both). */
HTP_API htp_result htp_send(htp_ctx *ctx, const void *buffer, size_t bytes, int peer, int tag);
HTP_API htp_result htp_recv(htp_ctx *ctx, void *buffer, size_t bytes, int peer, int tag);
/* The same on host memory whatever the device, over the host world (as
 * htp_allgather_host): staged weights, control messages, a snapshot's
 * copies. */
HTP_API htp_result htp_send_host(htp_ctx *ctx, const void *buffer, size_t bytes, int peer,
                                 int tag);
HTP_API htp_result htp_recv_host(htp_ctx *ctx, void *buffer, size_t bytes, int peer, int tag);
HTP_API htp_result htp_barrier(htp_ctx *ctx);
/* Marks the world failed; every peer's pending and later waits return
 * HTP_ERR_REMOTE (this rank's later calls return reason; HTP_ERR_TIMEOUT as a
 * reason is reported as such everywhere; HTP_OK becomes HTP_ERR_REMOTE).
 * Safe to call from any thread, any rank, more than once (the first failure
 * wins). On mpi the peers are told by a message; on nccl the communicator is
 * aborted. */
HTP_API void htp_abort(htp_ctx *ctx, htp_result reason);

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
HTP_API htp_result htp_world_add_fault(htp_world *world, const htp_fault *fault);
/* Called by the rank once per iteration: applies any fault due at
 * `iteration`. Returns HTP_ERR_REMOTE for a rank that was made to die or hang
 * and was released by an abort. A delay ends early, with the failure, if the
 * world fails meanwhile. Fails fast on a failed world. */
HTP_API htp_result htp_fault_point(htp_ctx *ctx, int64_t iteration);

/* Monotonic seconds (CLOCK_MONOTONIC), for timing compute. Thread safe. */
HTP_API double htp_now(void);
/* The calling thread's CPU seconds (CLOCK_THREAD_CPUTIME_ID): its own work,
 * not the time it waited for a core or a peer. Thread safe. */
HTP_API double htp_thread_seconds(void);

/* ===== Planning: pairs and units, detection, SEMI plans ================ *
 *
 * The work-unit model (DESIGN §4): a block has num_layers layers and each
 * layer two column->row pairs, attention (units = heads) and MLP (units =
 * neurons or fixed groups of neurons). Pair p = 2 * layer + kind. Under
 * Megatron TP every rank owns the same number of units of each pair kind, a
 * contiguous range: rank r owns global units [r * u, (r + 1) * u); "local
 * unit i" of rank r is global unit r * u + i.
 *
 * Every rank runs its own planner with the same config. Once per iteration
 * the ranks all-gather their compute seconds (htp_balancer_step does it),
 * every planner smooths the same numbers the same way and computes the SAME
 * plan: no coordinator, no plan broadcast. The planner is pure C on doubles
 * in rank order (no rank-local input, no reduction whose order depends on
 * the rank), so two planners fed the same history produce bitwise-identical
 * plans (htp_plan_equal). Inside, the planner is two parts: a stateful
 * detector (the EWMA speeds and hysteresis below) and a pure planning step,
 * a function of (config, relative speeds, straggler flags) alone, with no
 * I/O, trace or collective (htp_planner_plan_speeds runs it on given
 * speeds). Gathering the timings and writing the trace belong to the
 * balancer (htp_balancer_step). All memory is allocated at create; observing and
 * planning allocate nothing.
 *
 * Detection. speed sample of rank r = work_r / seconds_r, where work_r is the
 * cost of the units the current plan gave r (kept + migrated in, weighted by
 * unit cost), so a rank that pruned or handed off units is not mistaken for
 * a fast one. (htp_balancer_step, when every rank measured its attention
 * and MLP seconds, compares time per unit kind by kind instead, so unit
 * costs that misjudge a head against an MLP unit do not skew the speeds.)
 * Samples are smoothed by an EWMA (alpha) and divided by the
 * fastest smoothed speed: relative speeds are in (0, 1], the fastest rank is
 * 1. Every sample is first clamped to [1e-150, 1e150] work per second, so
 * seconds as extreme as the contract allows (a denormal, 1e308) still give
 * finite speeds in (0, 1] (at least 1e-300). The planning step plans a
 * speed below 1e-9 as 1e-9 (a rank that slow sheds all it may either way),
 * and the plan records the speeds it planned with. A healthy rank becomes a straggler after `hysteresis_iters` consecutive
 * iterations below enter_threshold; a straggler becomes healthy after as
 * many consecutive iterations at or above exit_threshold.
 *
 * Planning. Replans when the straggler set changes, or when a straggler
 * still below exit_threshold moved by more than replan_delta (relative
 * speed) since the current plan was made AND the new plan is predicted more
 * than 3% faster at the new speeds (so a plan does not flip on noise);
 * otherwise the plan (and its cached migrated weights) stays. A balancer
 * with hook times replaces a plan after the first only once it was
 * measured (its first 2 steps skipped, 3 averaged: the fitted fixed cost
 * needs both plans of a change; htp_planner_observe alone replans at
 * once). A rank the plan gave no work gives the detector no sample: its
 * speed stays what it was. The plan is computed from relative speeds s_r,
 * work normalised so each rank owns 1:
 *   - healthy ranks H keep their units; T0 = 1 / min over H of s_r is the
 *     time they need.
 *   - each straggler's resize deficit is g_r = 1 - s_r * T0 (the fraction of
 *     its units it must shed to finish in T0). SEMI sorts stragglers by g_r
 *     (largest first, ties by rank id); those with g_r > resize_limit
 *     migrate, the rest resize. RESIZE: all resize; MIGRATE: all migrate.
 *   - the target time T is the smallest T >= T0 at which the healthy ranks'
 *     spare capacity, sum over H of max(0, T s_h - 1), covers what the
 *     migrators must shed, sum over M of max(0, 1 - T s_m). A straggler
 *     that finishes its own units within T (T s_r >= 1: a mild one beside
 *     much slower migrators) joins the helpers and T is solved again (it
 *     falls, never below 1 / s of a helper). Target work per rank is then
 *     T s_r (proportional to speed); a straggler's excess is
 *     gamma_r = max(0, 1 - T s_r) of its units, capped at max_gamma.
 *   - in units of a pair kind with u units per rank: a resizer prunes
 *     round(gamma u) (accuracy costs; never more than asked); migrators
 *     hand off, per kind (each kind ends in its own all-reduce), the whole
 *     unit counts with the smallest predicted time of the slowest rank
 *     (max over ranks of units / speed, the helpers' added units counted),
 *     fewest units moved among equal plans; helper h absorbs at most the
 *     room it has at that time. What the helpers cannot absorb stays on
 *     the mildest migrators (computed, not pruned). Handed-off
 *     units are spread over helpers in proportion to spare capacity (largest
 *     remainder, ties by rank id), then matched migrator (deficit order) to
 *     helper (rank order) into flows.
 * Invariants, checked by htp_plan_check: every unit is computed exactly once
 * (by its owner or one helper) or pruned on its owner; policies NONE and
 * MIGRATE prune nothing; NONE and RESIZE move nothing; no rank receives more
 * than it can absorb; a rank never both sends and receives; only a rank
 * whose action is help receives (a healthy rank, or a straggler with time to
 * spare; never one that prunes).
 */
typedef enum htp_policy {
  HTP_POLICY_NONE = 0,    /* detect and trace only */
  HTP_POLICY_RESIZE = 1,  /* stragglers prune gamma of their units (approximate) */
  HTP_POLICY_MIGRATE = 2, /* stragglers hand gamma of their units to helpers (exact) */
  HTP_POLICY_SEMI = 3     /* worst stragglers migrate, mild ones resize (default) */
} htp_policy;

typedef enum htp_pair_kind {
  HTP_PAIR_ATTENTION = 0, /* units are heads */
  HTP_PAIR_MLP = 1,       /* units are neurons or groups of neurons */
  HTP_PAIR_KINDS = 2
} htp_pair_kind;

/* The pair encoding, in one place: pair = 2 * layer + kind. */
static inline int htp_pair_of(int layer, htp_pair_kind kind) {
  return HTP_PAIR_KINDS * layer + (int)kind;
}
static inline htp_pair_kind htp_pair_kind_of(int pair) {
  return (htp_pair_kind)(pair % HTP_PAIR_KINDS);
}
static inline int htp_pair_layer(int pair) { return pair / HTP_PAIR_KINDS; }
static inline int htp_num_pairs(int num_layers) { return HTP_PAIR_KINDS * num_layers; }

/* What the plan asks of a rank. */
typedef enum htp_action {
  HTP_ACTION_KEEP = 0,    /* computes its own units only (healthy, or a straggler whose
                           * gamma rounds to no whole unit) */
  HTP_ACTION_RESIZE = 1,  /* prunes plan->pruned units */
  HTP_ACTION_MIGRATE = 2, /* hands plan->sent units to helpers */
  HTP_ACTION_HELP = 3     /* healthy and computes migrated-in units */
} htp_action;

/* Returns "none", "resize", "migrate", "semi" (or "?"); htp_policy_parse
 * returns HTP_ERR_INVALID for an unknown name. */
HTP_API const char *htp_policy_name(htp_policy policy);
HTP_API htp_result htp_policy_parse(const char *name, htp_policy *policy);
HTP_API const char *htp_action_name(htp_action action);

#define HTP_PLANNER_CONFIG_MAGIC 0x48545050u /* "HTPP" */
/* The range of htp_planner_config.unit_cost. Costs are relative (a head
 * about 1, a real block's MLP unit of the same order); the bounds keep
 * work, shares and modelled seconds finite, and past a ratio of 1e9 the
 * cheaper kind no longer matters to a plan. */
#define HTP_UNIT_COST_MIN 1e-9
#define HTP_UNIT_COST_MAX 1e9
/* New fields go at the end only. A config not started from
 * HTP_PLANNER_CONFIG_INITIALIZER is rejected (magic). Defaults in brackets. */
typedef struct htp_planner_config {
  uint32_t magic;
  int world_size;         /* ranks, >= 1 [1] */
  int num_layers;         /* pairs = 2 * num_layers, >= 1 [1] */
  int units_per_rank[HTP_PAIR_KINDS]; /* heads / MLP units per rank, >= 1 [1, 1] */
  double unit_cost[HTP_PAIR_KINDS];   /* relative cost of one unit, in [HTP_UNIT_COST_MIN,
                                       * HTP_UNIT_COST_MAX] [1, 1] */
  htp_policy policy;      /* [HTP_POLICY_SEMI] */
  double ewma_alpha;      /* weight of the newest sample, (0, 1] [0.3] */
  double enter_threshold; /* straggler when relative speed < this [0.90] */
  double exit_threshold;  /* healthy again when >= this; >= enter [0.95] */
  int hysteresis_iters;   /* consecutive iterations to switch state, >= 1 [3] */
  double resize_limit;    /* SEMI: deficit above this migrates [0.25] */
  double replan_delta;    /* replan when a straggler's speed moved more [0.05] (and the
                           * new plan is predicted > 3% faster) */
  double max_gamma;       /* cap on gamma, (0, 1] [0.95] */
  /* Uneven shards (htp-opt's shares): owned[kind][rank] is how many of its
   * units_per_rank slots rank owns, 1 to units_per_rank (the rest are
   * empty: never computed, shed or moved). NULL: every rank owns all
   * [NULL, NULL]. The planner copies them; a rank's work, and so the
   * speeds it detects and plans with, counts the units it owns. */
  const int32_t *owned[HTP_PAIR_KINDS];
} htp_planner_config;
#define HTP_PLANNER_CONFIG_INITIALIZER                                                   \
  {HTP_PLANNER_CONFIG_MAGIC, 1, 1, {1, 1}, {1.0, 1.0}, HTP_POLICY_SEMI, 0.3, 0.90, 0.95, 3, \
   0.25, 0.05, 0.95, {NULL, NULL}}

/* One flow: `count` units of every pair of `kind` go from src to dst. */
typedef struct htp_flow {
  int32_t src, dst, count;
} htp_flow;

/* A plan: a read-only view into planner-owned arrays, valid until the
 * planner's next observe/plan call or destroy. Per-rank arrays have
 * world_size entries; per-kind-and-rank arrays are indexed
 * [kind * world_size + rank] and hold counts for EVERY pair of that kind. */
typedef struct htp_plan {
  int64_t version;          /* 0 = initial (no balancing); +1 per replan */
  htp_policy policy;
  int world_size;
  int num_layers;
  int units_per_rank[HTP_PAIR_KINDS];
  double target_time;       /* T (1 = a healthy rank's unbalanced time) */
  const double *speed;      /* [world] relative speeds the plan used */
  const uint8_t *straggler; /* [world] 1 for stragglers */
  const uint8_t *action;    /* [world] htp_action */
  const double *gamma;      /* [world] fraction shed (stragglers), else 0 */
  const int32_t *pruned;    /* [kind][world] units pruned per pair */
  const int32_t *sent;      /* [kind][world] units handed off per pair */
  const int32_t *received;  /* [kind][world] units taken in per pair */
  const int32_t *absorb;    /* [kind][world] most units the rank may take in */
  int num_flows[HTP_PAIR_KINDS];
  const htp_flow *flows[HTP_PAIR_KINDS]; /* sorted by (src deficit order, dst) */
  const int32_t *owned;     /* [kind][world] units each rank owns (NULL: units_per_rank) */
} htp_plan;

typedef struct htp_planner htp_planner;

/* Copies the config. Returns HTP_ERR_INVALID (htp_planner_config_check says
 * why) or HTP_ERR_NOMEM; *planner is NULL on failure. */
HTP_API htp_result htp_planner_create(const htp_planner_config *config, htp_planner **planner);
HTP_API void htp_planner_destroy(htp_planner *planner);
/* HTP_OK if the config is valid, else HTP_ERR_INVALID and why (may be NULL). */
HTP_API htp_result htp_planner_config_check(const htp_planner_config *config, char *why,
                                    size_t why_size);
/* Message of the planner's last failure ("" if none). */
HTP_API const char *htp_planner_last_error(const htp_planner *planner);
HTP_API const htp_planner_config *htp_planner_config_of(const htp_planner *planner);

/* Feeds one iteration: seconds[r] = rank r's compute seconds (all ranks, rank
 * order, each > 0 and finite). Updates the detector and replans if needed;
 * *replanned (may be NULL) says whether the plan changed. Allocates nothing.
 * Not thread-safe on one planner; distinct planners are independent. */
HTP_API htp_result htp_planner_observe(htp_planner *planner, const double *seconds, int *replanned);
/* Plans directly from relative speeds (world entries in (0, 1], e.g. from a
 * cost model) and straggler flags (NULL: speed < enter_threshold), bypassing
 * the detector and hysteresis. Always makes a new plan version. */
HTP_API htp_result htp_planner_plan_speeds(htp_planner *planner, const double *speeds,
                                   const uint8_t *stragglers);
/* The current plan; never NULL for a planner, NULL for a NULL planner. */
HTP_API const htp_plan *htp_planner_plan(const htp_planner *planner);
/* Smoothed relative speeds of the detector ([world], each in (0, 1], valid
 * like a plan); NULL for a NULL planner. */
HTP_API const double *htp_planner_speeds(const htp_planner *planner);
/* Iterations observed; -1 for a NULL planner. */
HTP_API int64_t htp_planner_iteration(const htp_planner *planner);

/* Checks the plan invariants above. HTP_OK, or HTP_ERR_INTERNAL and the first
 * violation in why (may be NULL). O(world + flows). */
HTP_API htp_result htp_plan_check(const htp_plan *plan, char *why, size_t why_size);
/* 1 when the two plans have the same content, bit for bit (every array).
 * NULL equals only NULL. */
HTP_API int htp_plan_equal(const htp_plan *a, const htp_plan *b);
/* Units rank computes in EVERY pair of kind under the plan: its own units
 * minus those pruned or handed off, plus those taken in. The one definition
 * of "a rank's units": detection, the step, the hooks' bookkeeping and
 * htp-sim all count with it. 0 for a NULL plan, a kind or a rank out of
 * range. */
static inline int32_t htp_plan_units(const htp_plan *plan, htp_pair_kind kind, int rank) {
  if (!plan || (unsigned)kind >= HTP_PAIR_KINDS || rank < 0 || rank >= plan->world_size)
    return 0;
  const int i = (int)kind * plan->world_size + rank;
  const int32_t owned = plan->owned ? plan->owned[i] : plan->units_per_rank[kind];
  return owned - plan->pruned[i] - plan->sent[i] + plan->received[i];
}
/* Units rank owns of kind under the config (its share of an uneven split;
 * units_per_rank when even). 0 for a NULL config, a kind or a rank out of
 * range. */
static inline int32_t htp_config_owned(const htp_planner_config *config, htp_pair_kind kind,
                                       int rank) {
  if (!config || (unsigned)kind >= HTP_PAIR_KINDS || rank < 0 || rank >= config->world_size)
    return 0;
  return config->owned[kind] ? config->owned[kind][rank] : config->units_per_rank[kind];
}
/* Work of rank r under the plan, in units of cost: the sum over kinds of
 * htp_plan_units * unit_cost, times num_layers. 0 for a NULL plan or
 * config, or a rank out of range. */
HTP_API double htp_plan_rank_work(const htp_plan *plan, const htp_planner_config *config, int rank);

/* ----- Selection and imputation (the balancer's choices) -----------------
 * Which units a shedding rank gives up (htp_balancer_config.selection):
 *   HTP_SELECT_RANDOM: a fixed seeded permutation per (seed, rank, pair);
 *     the first gamma u units of it are shed.
 *   HTP_SELECT_IMPORTANCE: least important first (ties: lower index); see
 *     htp_balancer_config for the statistic.
 *   HTP_SELECT_VARIATION (training): least-varying first, the paper's
 *     priority: how much a unit's weights changed over the last steps (see
 *     htp_balancer_config and htp_balancer_weights_updated): the sum of
 *     the unit's per-step update norms over the last 16 steps.
 *   HTP_SELECT_DISPLACEMENT (training): the same reading of "how much the
 *     weights changed" as the net change instead of the path: the norm of
 *     the unit's weights now minus 16 to 31 steps ago (an anchor copied
 *     every 16 steps), so a unit whose updates cancel (noise around a
 *     settled value) counts as barely changed.
 * Shed sets are nested as gamma grows (prefix of one order), so a plan
 * change moves as few units as it can. The per-rank unit tables, the
 * imputer and the migration cache that carry this out are private to
 * libhtprt (runtime/units_internal.h): the balancer owns them. */
typedef enum htp_select {
  HTP_SELECT_RANDOM = 0,
  HTP_SELECT_IMPORTANCE = 1,
  HTP_SELECT_VARIATION = 2,
  HTP_SELECT_DISPLACEMENT = 3
} htp_select;

/* Returns "random", "importance", "variation", "displacement" (or "?"); htp_select_parse returns
 * HTP_ERR_INVALID for an unknown name. */
HTP_API const char *htp_select_name(htp_select selection);
HTP_API htp_result htp_select_parse(const char *name, htp_select *selection);

/* What a pruned unit's activation reads (htp_balancer_config.impute). */
typedef enum htp_impute {
  HTP_IMPUTE_ZERO = 0,    /* pruned units read 0 (default) */
  HTP_IMPUTE_SAME = 1,    /* last stored value of the unit (0 if none, or older than
                           * htp_balancer_config.same_max_age) */
  HTP_IMPUTE_AVERAGE = 2  /* per row, the mean of the kept units' vectors */
} htp_impute;

HTP_API const char *htp_impute_name(htp_impute impute);
HTP_API htp_result htp_impute_parse(const char *name, htp_impute *impute);

/* ===== The balancer: what the balance hooks carry out ================== *
 *
 * --htp-balance-hooks marks each split attention and MLP pair of a block with
 * its pair number (2 * layer + kind); the lowering then calls the hooks
 * (htp_rt_*, runtime/htp_ops.h) instead of the plain kernels. A hook computes
 * the rank's share of the pair as the current plan says (DESIGN §4): the
 * units it keeps, the pruned units imputed (zero: skipped; same / average:
 * filled in and projected), nothing for the units handed off, plus the units
 * of other ranks it helps with, from the migrated weights it caches. It
 * writes the rank's partial sum of the pair's output (no bias), which the
 * block's all-reduce then completes. With no balancer attached to the context
 * every unit is kept: the plain split block.
 *
 * The balancer owns the rank's planner, unit table, imputer and migration
 * cache. Weights must stay in the same buffers across iterations: the hooks
 * remember where each pair's weights are, and the migration packs a unit
 * from there when it hands the unit off. */
typedef struct htp_balancer htp_balancer;

#define HTP_BALANCER_CONFIG_MAGIC 0x48545042u /* "HTPB" */
/* New fields go at the end only; start from HTP_BALANCER_CONFIG_INITIALIZER. */
typedef struct htp_balancer_config {
  uint32_t magic;
  htp_planner_config planner; /* world_size = the context's size; num_layers, units_per_rank
                               * (heads per rank, MLP units per rank), unit_cost, policy */
  htp_select selection;       /* which units a rank sheds [HTP_SELECT_RANDOM]; see below */
  uint64_t seed;              /* of the random selection [0] */
  htp_impute impute;          /* [HTP_IMPUTE_ZERO] */
  int64_t model_dim;          /* d: the block's width [0] */
  int64_t head_dim;           /* channels per head [0] */
  int64_t mlp_unit_width;     /* neurons per MLP unit [0] */
  int64_t same_max_age;       /* HTP_IMPUTE_SAME: steps a stored value may stand in [0: any] */
  double repartition_ratio;   /* run-time re-partition, see below; 0: never [0] */
  int32_t element_bytes;      /* of the block's tensors: 4 (f32) or 2 (bf16) [0: 4] */
} htp_balancer_config;
#define HTP_BALANCER_CONFIG_INITIALIZER                                                  \
  {HTP_BALANCER_CONFIG_MAGIC, HTP_PLANNER_CONFIG_INITIALIZER, HTP_SELECT_RANDOM, 0,       \
   HTP_IMPUTE_ZERO, 0, 0, 0, 0, 0.0, 0}
/* element_bytes 2: the pairs' hooks are the bf16 ones (htp_rt_attention_bf16,
 * htp_rt_mlp_bf16), with every policy, selection and imputation (the
 * scores read bf16 activations and weights widened; the imputer keeps f32
 * values and writes them back rounded once); migrated units travel as bf16
 * shards (htp_balancer_unit_bytes). No re-partition (it moves f32 weights
 * and optimizer states: training): repartition_ratio is ignored there
 * (runtime/repartition.c), as in inference, where migrated units cost no
 * bytes a step. */
/* selection:
 *   HTP_SELECT_RANDOM (the default): the seeded permutation of the unit
 *     table (seed), independent of the data.
 *   HTP_SELECT_IMPORTANCE: a calibration statistic (DESIGN §4), kept by the
 *     hooks per local unit of each pair: score = EWMA (alpha 0.3; the first
 *     sample as is) of mean |activation| x ||output weights||_F, where the
 *     activation is the unit's columns of the head context / MLP hidden
 *     activation (after GELU), averaged over rows and columns in one pass
 *     over what the hook computed anyway, and the weights are the head's
 *     proj columns / the unit's fc2 columns (norms computed once per pair,
 *     when its hook first sees the buffer). Units not computed in an
 *     iteration (pruned, handed off) keep their last score; migrated-in
 *     units are scored by their owner only. The scores take effect at the
 *     next plan change (htp_balancer_end_iteration / a new plan version),
 *     never in between, so the shed sets stay stable between replans; the
 *     lowest-scoring units are shed first (ties: lower index). Before any
 *     hook ran, all scores are 0 (index order). Scores are deterministic
 *     for a rank's data and need not agree across ranks: the owner
 *     decides, and the migration transfer delivers the ids to helpers. */

/* same_max_age: a pruned unit reads its stored value (forward: its
 * activation; backward: its gradient at its first matrix's output) only while that
 * value is at most this many steps (htp_balancer_step calls) old, and 0
 * after; 1 is "the last step's value". Under a plan that prunes the same
 * units for many steps an unbounded age (0) replays one old batch's values
 * every step, which training must not do (htp-run --train bounds it). */

/* repartition_ratio (DESIGN §12): with it > 0 a migration that holds is
 * turned into a change of ownership. Migration moves a unit's weights to a
 * helper once per plan, and in training (htp_balancer_weights_updated
 * every step) again every step with its gradient back: 2 x its weights a
 * step. A re-partition moves the unit for good, into an empty slot of the
 * helper (the split's room beyond what it owns: uneven shares or spare
 * room), with the buffers registered beside its weights
 * (htp_balancer_add_state: optimizer moments) and zeroes its old slot; the
 * rank then owns and updates it, and nothing crosses per step. Rent or buy:
 * while the same ranks migrate, the balancer adds up the bytes the
 * migration of the units a re-partition could move (those its helpers have
 * empty slots for) costs a step (predicted from the flows; 0 in inference,
 * where helpers keep what they were sent), and when that sum reaches
 * repartition_ratio x the bytes the re-partition would move once,
 * and the migration has held for hysteresis_iters steps, it re-partitions
 * at the end of that iteration: the plan's flows become moves (as many of
 * each flow's units as the helper has empty slots for; a rank keeps at
 * least one), every rank moves them at once, the planner starts over on
 * the new ownership (a new plan version that balances nothing, the
 * detector reset) and the selection scores and imputation stores restart.
 * The default 2 is the break-even of a move there and one back when the
 * slowdown ends. A helper's moved-in units go to its first empty slots,
 * the migrator gives its last owned ones, so owned units stay the first
 * slots. Ranks must register the same states (the bytes agree). On a
 * device the weights and states are device memory: a rank that moves
 * units copies its shards of the pair down, moves the units in host
 * memory and copies them back up (built; run on the checked device, not
 * yet on a GPU). The trace
 * says what was weighed ("partition", htp_balancer_set_trace). */

/* Hookless balancer: model_dim, head_dim and mlp_unit_width all 0 (as the
 * initializer leaves them). For a block that calls no hooks: the balancer
 * then detects, plans and traces (htp_balancer_step) but has no unit table,
 * imputer or migration cache, so nobody carries its plans out; the hooks
 * treat it as no balancer (every unit computed), and
 * htp_balancer_end_iteration is htp_balancer_step on the measured compute
 * (stretched by the slowdown). Otherwise all three
 * must be >= 1. */

/* Creates the rank's balancer and attaches it to ctx (one per context), so
 * the hooks of compiled code find it. config is copied; its
 * planner.world_size must be the context's world size. Every rank creates
 * one with the same config (the plans must agree). Errors: HTP_ERR_INVALID
 * (ctx NULL: no message; bad config, or ctx already has a balancer: message
 * in htp_last_error(ctx)), HTP_ERR_NOMEM. Not collective. */
HTP_API htp_result htp_balancer_create(htp_ctx *ctx, const htp_balancer_config *config,
                               htp_balancer **balancer);
/* HTP_OK if config is valid on its own (everything htp_balancer_create
 * checks but what needs the context: the world size and the device), else
 * HTP_ERR_INVALID and why (may be NULL): for a launcher to refuse a config
 * before it starts ranks. */
HTP_API htp_result htp_balancer_config_check(const htp_balancer_config *config, char *why,
                                             size_t why_size);
/* Bytes of one unit's weights of kind as the migration moves them (a head's
 * qkv rows, qkv bias and proj columns; an MLP unit's fc1 rows, fc1 bias and
 * fc2 columns), from config's model_dim, head_dim and mlp_unit_width. */
HTP_API int64_t htp_balancer_unit_bytes(const htp_balancer_config *config, htp_pair_kind kind);
/* Detaches from the context and frees; NULL is fine. Destroy the balancer
 * BEFORE its context (it reads the context to detach). */
HTP_API void htp_balancer_destroy(htp_balancer *balancer);
/* The balancer attached to ctx, or NULL. */
HTP_API htp_balancer *htp_ctx_balancer(const htp_ctx *ctx);
/* The balancer's planner (for htp_planner_speeds, htp_planner_plan). */
HTP_API htp_planner *htp_balancer_planner(htp_balancer *balancer);
/* Emulates a slower device for experiments and tests (htp-run --slow):
 * from now on each hook waits (factor - 1) times its own time before it
 * returns (so the rank is late to the block's all-reduce, and shedding units
 * sheds slowed time too) and books factor times its compute in
 * htp_balancer_hook_seconds and the per-site seconds. factor in [1, 1e6];
 * 1 turns it off. */
HTP_API htp_result htp_balancer_set_slowdown(htp_balancer *balancer, double factor);
/* Which clock times the hooks (and so what the planner compares and what
 * --slow stretches). HTP_CLOCK_WALL (default): the monotonic clock.
 * HTP_CLOCK_THREAD: the rank thread's CPU time (htp_thread_seconds), for
 * more ranks than cores, where the wall clock books the time a rank waited
 * for a core as its work; it is each rank's own work only where the kernels
 * run on the rank's thread (one kernel thread a rank) and on the CPU.
 * On it --slow books factor times the hooks' CPU time but does not wait: a
 * wait is no CPU work, so the caller models the slowed step instead (the
 * booked seconds less the hooks' own).
 * HTP_CLOCK_UNITS: as HTP_CLOCK_THREAD for htp_balancer_hook_seconds, but
 * the planner is fed a modelled time instead of a measured one: each hook
 * call books the units it ran (kept plus migrated in) times their
 * unit_cost times the slowdown (twice that in backward), a head's forward
 * at full speed being HTP_UNIT_CLOCK_SECONDS. Plans then depend on the
 * units and slowdowns alone, not on timer noise: two runs that differ only
 * in which units are shed (the selection) get the same plans at the same
 * steps, which paired accuracy experiments need. */
typedef enum htp_clock { HTP_CLOCK_WALL, HTP_CLOCK_THREAD, HTP_CLOCK_UNITS } htp_clock;
#define HTP_UNIT_CLOCK_SECONDS 1e-3
HTP_API htp_result htp_balancer_set_clock(htp_balancer *balancer, htp_clock clock);
/* Seconds this rank spent in the hooks since the last end_iteration: the
 * work the plan moves, and what htp_balancer_end_iteration compares when
 * they ran: the block's other ops (layer norms, residuals) do not shrink
 * when units are shed, and counting them would make a balanced straggler
 * look slower per unit. */
HTP_API double htp_balancer_hook_seconds(const htp_balancer *balancer);
/* Trace: htp_balancer_step writes one JSON line per rank per iteration:
 *   {"iter","rank","seconds","comm_seconds","site_seconds":[attention,mlp],
 *    "speed","plan","replanned","policy","target_time","action","gamma",
 *    "pruned":[a,m],"sent":[a,m],"received":[a,m],"moved_bytes",
 *    "fixed_units":[a,m],"kind_speeds":[a,m],
 *    "stragglers":[{"rank","speed","gamma","action"}]}
 * seconds: the compute seconds passed to the step; comm_seconds: what this
 * rank spent in collectives and transfers (waiting for peers included)
 * since its previous line (or since the balancer was created): the growth
 * of htp_ctx_comm_seconds, the step's own all-gather included, so compute
 * and waiting can be plotted side by side. fixed_units: the hooks' fixed
 * cost per call fitted so far, in units of each kind (what the detector
 * adds to a rank's units before comparing time per unit, and the planner
 * to a rank's units when it splits whole units among migrators and
 * helpers; 0 until a plan change showed it). kind_speeds: this rank's
 * speed per kind of unit, the kind's fastest rank's time per unit over its
 * own (an EWMA), which places migrated units kind by kind; null until the
 * rank computed a unit of the kind. site_seconds are what the
 * planner was fed: on HTP_CLOCK_UNITS the modelled seconds, and then
 * "measured_seconds":[a,m] follows with the hooks' own (CPU, times the
 * slowdown). site_seconds, fixed_units and kind_speeds are null for a hookless
 * balancer; non-finite numbers are written as null. At most 64
 * stragglers are listed (then "truncated":true), so a line stays under
 * 8 KiB. On the first line after the hooks applied a new plan that still
 * carries that plan (and only there; a plan replaced at once is never
 * listed), "pruned_units" and "sent_units" list per pair the local unit
 * ids this rank prunes and hands off under it ([[ids of pair 0], ...];
 * pair 2l is layer l's attention, 2l+1 its MLP), which can make that
 * line longer. With repartition_ratio > 0 every line has "owned":[a,m] (the
 * units this rank owns of each kind now) and "repartitions" (so far), and
 * a line whose plan migrates has "partition":{"held","step_bytes",
 * "spent_bytes","once_bytes","choice"}: steps the same ranks have
 * migrated, the bytes a step of this plan moves, the sum so far, what a
 * re-partition would move once, and "migrate" or "repartition" (carried
 * out at the end of this iteration); the first line after a re-partition
 * has "repartitioned":{"bytes","seconds"}: what this rank sent and
 * received in it and how long it took here. The stream stays owned by the
 * caller;
 * NULL turns the trace off.
 * Each line is written with one locked fwrite, so ranks may share a
 * stream. */
HTP_API void htp_balancer_set_trace(htp_balancer *balancer, FILE *stream);
/* The trace's "iter" of this balancer's first step (default 0): a run that
 * goes on in a new world (htp-run --train --elastic) numbers its lines by
 * the run's steps, not the new balancer's. Negative values are taken as 0;
 * NULL is fine. */
HTP_API void htp_balancer_set_trace_first_iter(htp_balancer *balancer, int64_t first);

/* The per-iteration step, once per iteration on every rank (collective):
 * all-gathers this rank's compute_seconds and the per-site seconds its
 * hooks measured since the last step (then resets them), feeds the
 * planner the same numbers in rank order (so every rank computes the same
 * plan), writes the trace line, and returns the plan in force for the next
 * iteration in *plan. It does not carry the plan out: that is
 * htp_balancer_end_iteration, which also chooses compute_seconds from what
 * the caller measured; call this directly only to feed the planner given
 * seconds (> 0, finite: without time spent waiting for peers). Errors:
 * HTP_ERR_INVALID (a NULL balancer; a NULL plan or bad compute_seconds,
 * which fail the world as a bad collective argument does, so the peers
 * get HTP_ERR_REMOTE at once; a rank whose balancer config differs from
 * rank 0's, found in the all-gather by every rank at once: the world
 * fails; message in the context's last error); those of the all-gather as
 * they are. */
HTP_API htp_result htp_balancer_step(htp_balancer *balancer, double compute_seconds,
                             const htp_plan **plan);

/* What a rank measured over one iteration's work (its call, and in training
 * the update that follows it): the caller's marks around it on the rank's
 * stream (htp_ctx_mark / htp_ctx_elapsed: the device's clock), the growth of
 * htp_ctx_comm_seconds over the same window (waiting for peers in
 * collectives, not work), and the growth of htp_thread_seconds (the rank
 * thread's CPU time). All >= 0 and finite. */
typedef struct htp_iteration_measure {
  double wall_seconds;
  double comm_seconds;
  double thread_seconds;
} htp_iteration_measure;

/* What the balancer made of a measure. */
typedef struct htp_iteration_times {
  /* The rank's own work: wall - comm (HTP_CLOCK_WALL), or thread_seconds
   * (HTP_CLOCK_THREAD, HTP_CLOCK_UNITS); on a hookless balancer times the
   * slowdown (htp_balancer_set_slowdown), which on the wall clock it also
   * waits out here, as a slower device would take it. */
  double compute_seconds;
  /* What the hooks booked (htp_balancer_hook_seconds; 0 when none ran). */
  double hook_seconds;
  /* What the planner compared: the hooks' seconds when they ran (the work a
   * plan can move), else compute_seconds (at least 1e-9: a block too small
   * for the clock still gets a time). */
  double planned_seconds;
} htp_iteration_times;

/* The end of an iteration, once per iteration on every rank (collective).
 * It chooses the time to compare (htp_iteration_times above) from what the
 * caller measured, runs htp_balancer_step on it, then, when the plan
 * version changed, the unit table and the migration transfers for the new
 * plan (weights packed from where the hooks last saw them).
 * times (may be NULL) receives the figures; *plan (may be NULL) the plan in
 * force for the next iteration.
 * Errors: HTP_ERR_INVALID for a NULL balancer, or (failing the world: the
 * peers get HTP_ERR_REMOTE at once) a NULL measured or a negative or
 * non-finite figure; those of htp_balancer_step; a failed transfer (e.g. a
 * plan that migrates a pair whose hook never ran: nothing to pack) fails
 * the world, so the peers return HTP_ERR_REMOTE at once rather than at
 * their deadline. With HTP_SELECT_IMPORTANCE the scores the hooks gathered
 * (see htp_balancer_config.selection) are handed to the unit table here,
 * when the plan version changed, before the table is recomputed. */
HTP_API htp_result htp_balancer_end_iteration(htp_balancer *balancer,
                                              const htp_iteration_measure *measured,
                                              htp_iteration_times *times,
                                              const htp_plan **plan);

/* Nonzero: until called again with 0, the hooks compute every unit of the
 * rank's own shard, as without a balancer, and book no time (training
 * evaluates the whole model between epochs so). The plan, the unit tables
 * and the migration cache stay as they are. Not collective; every rank of
 * a block must agree, or a helper would add units its owner also
 * computes. HTP_ERR_INVALID for NULL. */
HTP_API htp_result htp_balancer_suspend(htp_balancer *balancer, int suspended);

/* Training: the caller changed the weights the hooks read, in place (an
 * optimizer step), on every rank, once per step before
 * htp_balancer_end_iteration. That end of iteration then sends every
 * migrated unit's weights to its helper again (the helper's copy would be a
 * step old; migration stays exact), and with HTP_SELECT_VARIATION each
 * local unit's update norm ||W_t - W_{t-1}|| (its qkv or fc1 rows, their
 * bias, its proj or fc2 columns) enters a window of the last 16 steps whose
 * sum is the unit's score: the least-varying units are shed first. Not
 * collective. HTP_OK for a hookless balancer (nothing to do);
 * HTP_ERR_INVALID for NULL; HTP_ERR_NOMEM. */
HTP_API htp_result htp_balancer_weights_updated(htp_balancer *balancer);

/* Run-time re-partition (repartition_ratio above). A buffer of the shape
 * of a weight the balance hooks read (a pair's first weight, its bias or
 * its second weight, as the hooks are passed them) that belongs to the
 * same units and moves with them: an optimizer moment. Registered once per
 * buffer on every rank alike, before or after the hooks first ran (matched
 * by the weight's address when a re-partition moves units); weight and
 * state stay owned by the caller and must stay where they are. A weight
 * may have several states (AdamW's m and v). HTP_ERR_INVALID for NULL
 * arguments or a state registered twice; HTP_ERR_NOMEM. Not collective. */
HTP_API htp_result htp_balancer_add_state(htp_balancer *balancer, const void *weight,
                                          void *state);
/* Re-partitions carried out so far (0 for NULL). */
HTP_API int64_t htp_balancer_repartitions(const htp_balancer *balancer);
/* Bytes of device memory the balancer holds of its own now (its compact
 * shards and migrated units in the context's memory, each buffer grown to
 * its largest request); 0 on the CPU (its buffers are the host's), for
 * NULL and for a hookless balancer. A compiled block bounds it (the
 * signature's balancer_memory_bytes: kernels/htp_scratch.h). */
HTP_API uint64_t htp_balancer_device_bytes(const htp_balancer *balancer);
/* Who owns what now, for the pair weight (or registered state) at `weight`
 * on this rank: its kind's slots on every rank, slot_units[r * room + s] =
 * the global unit (head, or MLP unit of mlp_unit_width neurons, numbered
 * as in the global tensor) in slot s of rank r, -1 for an empty slot;
 * room = units_per_rank of the kind, written to *room. count is
 * slot_units' length (>= world_size x room). Before any re-partition this
 * is the compiled split: rank r's owned units follow rank r - 1's. A
 * gather of a re-partitioned weight must follow it. HTP_ERR_INVALID for
 * NULL arguments, a short array, a hookless balancer, or an address that
 * is no weight or state of a pair the hooks have run. */
HTP_API htp_result htp_balancer_slot_units(const htp_balancer *balancer, const void *weight,
                                           int32_t *slot_units, size_t count, int64_t *room);

/* ===== Device memory and timing ======================================= *
 * What an embedder runs a block's buffers on (the context's kernel table:
 * host memory on the CPU), and the clocks that time it. */

/* The context's device memory, for buffers a block runs on (htp-run
 * --device): through the kernel table, so host memory on the CPU table and
 * device memory on the CUDA one. alloc gives bytes (>= 1) in *out; free
 * accepts NULL. upload copies host -> device, download device -> host after
 * the work enqueued on the rank's stream; both return once the copy is
 * done. synchronize waits for the rank's stream. Failures fail the world,
 * as the ops do. ctx may be NULL, as for the ops (runtime/htp_ops.h): the
 * CPU table, host memory, and a failure without a message. */
HTP_API htp_result htp_mem_alloc(htp_ctx *ctx, size_t bytes, void **out);
HTP_API htp_result htp_mem_free(htp_ctx *ctx, void *ptr);
HTP_API htp_result htp_mem_upload(htp_ctx *ctx, void *dst, const void *host_src, size_t bytes);
HTP_API htp_result htp_mem_download(htp_ctx *ctx, void *host_dst, const void *src,
                                    size_t bytes);
HTP_API htp_result htp_ctx_synchronize(htp_ctx *ctx);
/* The context's device memory now: bytes free and in all (a GPU's, shared
 * with whoever else holds it), so a caller can refuse a run that will not
 * fit before allocating. HTP_ERR_UNSUPPORTED, without failing the world,
 * where the device's memory is the host's (the CPU). */
HTP_API htp_result htp_mem_info(htp_ctx *ctx, size_t *free_bytes, size_t *total_bytes);
/* The device memory the context's kernels hold of their own, beside the
 * buffers their callers give them (CUDA's workspaces: the bf16 kernels' f32
 * sums, the every-head attention scratch, staged lists; on the checked
 * device the most the CUDA kernels would have asked for by the calls so
 * far), in *bytes. A compiled block bounds it (the signature's
 * kernel_memory_bytes). HTP_ERR_UNSUPPORTED, without failing the world,
 * where the kernels' memory is the host's (the CPU). */
HTP_API htp_result htp_mem_kernels_own(htp_ctx *ctx, uint64_t *bytes);

/* Per-call profile: where a block's iteration goes. After start, every
 * call a compiled block makes on ctx (an htp_op_* entry point, a balance
 * hook htp_rt_*, an all-reduce) from the first htp_ctx_profile_iteration on
 * is timed on the device's own clock (events on a GPU's stream) and waited
 * for before the next, and booked by its place in the iteration: call k of
 * iteration i. A call inside a timed one (an op a hook or a fused op makes)
 * is in that one's time. A profiled iteration therefore takes longer than
 * an unprofiled one (no call overlaps the next; each starts from an idle
 * stream). start: room for `iterations` iterations, 1 to
 * HTP_PROFILE_MAX_ITERATIONS (a new start discards the old profile);
 * iteration: the calls that follow are the next iteration's
 * (HTP_ERR_INVALID past `iterations`, and from then on no call is booked:
 * the profile holds its first `iterations`); calls: the places seen;
 * call: place k's name (the first call's there; a string the runtime
 * keeps) and *seconds its `iterations` seconds, NAN where nothing was
 * booked (NULL, and *seconds NULL, for a bad place); stop frees it
 * (htp_ctx_destroy does too).
 * A failing mark stops the booking; the calls themselves never fail for
 * the profile. Refusals (HTP_ERR_INVALID, HTP_ERR_NOMEM) leave their
 * message on ctx and, unlike a bad call's, do not fail the world. */
#define HTP_PROFILE_MAX_ITERATIONS 100000 /* each place holds a double per iteration */
HTP_API htp_result htp_ctx_profile_start(htp_ctx *ctx, int iterations);
HTP_API htp_result htp_ctx_profile_iteration(htp_ctx *ctx);
HTP_API int htp_ctx_profile_calls(const htp_ctx *ctx);
HTP_API const char *htp_ctx_profile_call(const htp_ctx *ctx, int call, const double **seconds);
HTP_API void htp_ctx_profile_stop(htp_ctx *ctx);
/* Timing on the device's clock (CUDA events on the rank's stream; the CPU's
 * monotonic clock): mark(ctx, 0) before the work, mark(ctx, 1) after, then
 * elapsed waits for mark 1 and gives the seconds between. A misuse (a mark
 * other than 0 or 1, elapsed without both marks) is HTP_ERR_INVALID and,
 * as an op's bad argument, fails the world. */
HTP_API htp_result htp_ctx_mark(htp_ctx *ctx, int which);
HTP_API htp_result htp_ctx_elapsed(htp_ctx *ctx, double *seconds);

/* Seconds this context spent inside collectives and transfers (waiting for
 * peers included) since it was created. A rank's compute time is its call
 * time minus the growth of this: otherwise every rank would look as slow
 * as the slowest, which it waits for in the all-reduce. */
HTP_API double htp_ctx_comm_seconds(const htp_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* HTP_H */
