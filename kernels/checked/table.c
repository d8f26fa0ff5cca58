/*===- kernels/checked/table.c - The checked device's kernel table --------===*
 *
 * A device that computes on the CPU but behaves like a GPU towards the code
 * that drives it (DESIGN §10), so that what would fail on the first GPU run
 * fails here, in CI, where there is no GPU:
 *
 *  - Memory from its own arena (arena.c): device addresses the host cannot
 *    dereference, each entry checking that every tensor it gets is device
 *    memory and that the bytes its shapes imply fit in the allocation, and
 *    that every host array it reads (unit lists, part pointers) is not.
 *  - The CUDA kernels' contracts where they differ from the CPU's: the
 *    attention's scratch is the CUDA formula (htp_scratch.h), and each
 *    entry books the memory of their own the CUDA kernels would ask for
 *    (htp_scratch.h's own-memory formulas: the bf16 kernels' f32 sums, the
 *    every-head attention scratch, staged lists, the training kernels'
 *    doubles; cuBLASLt's workspace wherever a linear with a bias could take
 *    it, the default epilogue), which own_memory reports
 *    for htp-run to hold against the compiler's bound.
 *  - A stream: the work of an entry is done when the entry returns (by the
 *    CPU table, on host copies of nothing: the kernels read the arena's
 *    memory through translated addresses), except copies between device
 *    buffers, which wait in the stream's queue until its next other entry
 *    or synchronize (on the rank's own thread) or any release (cudaFree
 *    waits for the device), so that a peer that reads
 *    what a copy writes without the writer's stream being waited for reads
 *    the old bytes, as it may on a GPU; the emulated stream stays
 *    busy for a further `latency` seconds per entry (HTP_CHECKED_LATENCY_US,
 *    default 200), as a GPU's queue is busy after its launches return.
 *    synchronize, to_host, to_device and elapsed wait for that; marks are
 *    events on the stream (the time the stream reaches them), so host clocks
 *    around enqueued work book too little, and waits book the queue.
 *  - Marks used as one pair per caller: recording mark 0 again before its
 *    elapsed was read (two timers sharing one pair), mark 1 without mark 0,
 *    or elapsed without both, fail.
 *  - SM partitions (htp-run --sms) counted as the CUDA device's green
 *    contexts take them: whole groups of 8, no more than the device has.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "kernels/checked/checked.h"

#include "kernels/htp_scratch.h"
#include "kernels/sm_partition.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A copy waiting in the stream's queue (host addresses, translated). */
typedef struct queued_copy {
  void *dst;
  const void *src;
  size_t dst_pitch, src_pitch, row_bytes, rows;
} queued_copy;

typedef struct checked_env {
  htp_kernel_env cpu; /* the CPU environment the kernels run with */
  struct checked_env *next; /* the process's environments (all_envs) */
  pthread_mutex_t queue_lock; /* the queue: its stream's thread, or a release's */
  queued_copy *queued; /* copies not yet done, in order */
  size_t num_queued, queued_capacity;
  double ready;       /* when the emulated stream has done its queued work */
  double latency;     /* seconds each entry keeps the stream busy after it returns */
  double marks[HTP_KERNEL_TIMERS][2];
  int recorded[HTP_KERNEL_TIMERS]; /* bit `which`: mark `which` recorded since the last elapsed */
  int sm_groups;      /* SM groups this rank's partition holds (0: the whole device) */
  htp_cuda_own own;   /* the most the CUDA kernels would have asked of their own memory */
} checked_env;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const htp_kernel_table *cpu(void) { return htp_cpu_kernel_table(); }

static checked_env *object_of(const htp_kernel_env *env, const char *entry) {
  if (!env || !env->kernels) {
    htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM,
                    "checked %s: the environment has no checked device "
                    "(htp_checked_kernel_env_create failed or was not called)",
                    entry);
    return NULL;
  }
  return (checked_env *)env->kernels;
}

/* The work an entry just did, started at `started` on the host, as the
 * stream sees it: after what was queued, then busy for latency more. */
static void enqueued(checked_env *self, double started) {
  const double done = now();
  const double begin = self->ready > started ? self->ready : started;
  self->ready = begin + (done - started) + self->latency;
}

/* Sleeps until the monotonic clock reads `until`. */
static void wait_until(double until) {
  for (double left = until - now(); left > 0; left = until - now()) {
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
  }
}

static void wait_stream(const checked_env *self) { wait_until(self->ready); }

/* Every environment of the process, so that a release waits for all their
 * queues, as cudaFree waits for the whole device: a rank's queued copy may
 * read or write a peer's buffer that the peer then frees. Lock order:
 * envs_lock, then an environment's queue_lock. */
static pthread_mutex_t envs_lock = PTHREAD_MUTEX_INITIALIZER;
static checked_env *all_envs;

static void do_copy(const queued_copy *q) {
  for (size_t r = 0; r < q->rows; ++r)
    memcpy((char *)q->dst + r * q->dst_pitch, (const char *)q->src + r * q->src_pitch,
           q->row_bytes);
}

/* The queue's copies, in order, with queue_lock held. */
static void run_locked(checked_env *self) {
  for (size_t i = 0; i < self->num_queued; ++i) do_copy(&self->queued[i]);
  self->num_queued = 0;
}

/* Does the stream's queued copies, in order: before any other entry of the
 * stream runs (a stream is in order) and when it is waited for. */
static void run_queued(checked_env *self) {
  pthread_mutex_lock(&self->queue_lock);
  run_locked(self);
  pthread_mutex_unlock(&self->queue_lock);
}

/* Every stream's queued copies: a release, as cudaFree, waits for the device. */
static void run_every_queue(void) {
  pthread_mutex_lock(&envs_lock);
  for (checked_env *e = all_envs; e; e = e->next) run_queued(e);
  pthread_mutex_unlock(&envs_lock);
}

/* Queues a copy (done at once, after those queued, when the queue cannot
 * grow: later, never lost). */
static void queue_copy(checked_env *self, queued_copy copy) {
  pthread_mutex_lock(&self->queue_lock);
  if (self->num_queued == self->queued_capacity) {
    const size_t grown = self->queued_capacity ? 2 * self->queued_capacity : 16;
    queued_copy *more = realloc(self->queued, grown * sizeof *more);
    if (!more) {
      run_locked(self);
      do_copy(&copy);
      pthread_mutex_unlock(&self->queue_lock);
      return;
    }
    self->queued = more;
    self->queued_capacity = grown;
  }
  self->queued[self->num_queued++] = copy;
  pthread_mutex_unlock(&self->queue_lock);
}

/* ----- The entries' common shape ---------------------------------------------
 * BEGIN names the entry; DEVICE / OPTIONAL check one tensor argument and
 * replace it by its host address; HOST checks a host array; RUN calls the
 * CPU table's entry and books it on the stream. */
#define BEGIN_QUEUED(name)                                                                     \
  checked_env *self = object_of(env, name);                                                    \
  if (!self) return HTP_KERNEL_ERR_SYSTEM;                                                     \
  const char *entry_ = name;                                                                   \
  htp_kernel_status checked_ = HTP_KERNEL_OK
#define BEGIN(name)                                                                            \
  BEGIN_QUEUED(name);                                                                          \
  run_queued(self)

#define SPAN(p, bytes, optional)                                                               \
  do {                                                                                         \
    void *host_;                                                                               \
    checked_ = htp__checked_span(env, entry_, #p, p, (bytes), (optional), &host_);             \
    if (checked_ != HTP_KERNEL_OK) return checked_;                                            \
    p = host_;                                                                                 \
  } while (0)
#define DEVICE(p, bytes) SPAN(p, bytes, 0)
#define OPTIONAL(p, bytes) SPAN(p, bytes, 1)
#define HOST(p, bytes)                                                                         \
  do {                                                                                         \
    checked_ = htp__checked_host(env, entry_, #p, p, (bytes));                                 \
    if (checked_ != HTP_KERNEL_OK) return checked_;                                            \
  } while (0)
/* The unit list as the CUDA kernels check it (htp_kernel_unit_list_problem). */
#define UNITS(width, list, count, limit)                                                       \
  do {                                                                                         \
    char why_[96];                                                                             \
    if (htp_kernel_unit_list_problem((width), (list), (count), (limit), why_, sizeof why_))    \
      return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked %s: %s", entry_, why_);     \
  } while (0)
/* CUDA's int sizes (htp_kernel_gemm_sizes_problem and the attention's),
 * refused before any pointer is looked at, as CUDA does. */
#define SIZES(problem_call)                                                                    \
  do {                                                                                         \
    char why_[160];                                                                            \
    if (problem_call)                                                                          \
      return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked %s: %s", entry_, why_);     \
  } while (0)
#define GEMM_SIZES(rows, in, out)                                                              \
  SIZES(htp_kernel_gemm_sizes_problem((rows), (in), (out), why_, sizeof why_))
#define ATTENTION_SIZES(batch, tokens, model_dim, heads, head_dim)                             \
  SIZES(htp_kernel_attention_sizes_problem((batch), (tokens), (model_dim), (heads),           \
                                           (head_dim), why_, sizeof why_))
/* What the CUDA twin of the entry would ask of its own memory. */
#define OWN(which, bytes) htp_cuda_own_need(&self->own, HTP_CUDA_OWN_##which, (bytes))
/* A linear with a bias may run as one cuBLASLt matmul (either type). */
#define OWN_LT(bias) do { if (bias) OWN(LT, HTP_CUDA_LT_WORKSPACE_BYTES); } while (0)
#define RUN(call)                                                                              \
  do {                                                                                         \
    const double started_ = now();                                                             \
    checked_ = (call);                                                                         \
    enqueued(self, started_);                                                                  \
    return checked_;                                                                           \
  } while (0)

/* Element counts and byte sizes (-1: overflow or a negative size). */
static int64_t n2(int64_t a, int64_t b) { return htp__size_mul(a, b); }
static int64_t n3(int64_t a, int64_t b, int64_t c) { return n2(n2(a, b), c); }
#define F32(n) htp__size_mul((n), (int64_t)sizeof(float))
#define BF16(n) htp__size_mul((n), (int64_t)sizeof(htp_bf16))
#define IDS(n) htp__size_mul((n), (int64_t)sizeof(int32_t))

/* ----- Forward entries, f32 and bf16 (T, BYTES: the element type and its size) */

#define ELEMENTWISE_ENTRIES(sfx, T, BYTES)                                                     \
  static htp_kernel_status linear_##sfx(const htp_kernel_env *env, const T *x, const T *w,     \
                                        const T *b, T *y, int64_t rows, int64_t in,            \
                                        int64_t out) {                                         \
    BEGIN("linear_" #sfx);                                                                     \
    GEMM_SIZES(rows, in, out);                                                                 \
    DEVICE(x, BYTES(n2(rows, in)));                                                            \
    DEVICE(w, BYTES(n2(out, in)));                                                             \
    OPTIONAL(b, BYTES(out));                                                                   \
    DEVICE(y, BYTES(n2(rows, out)));                                                           \
    if (BF16_SUMS && b) OWN(SUMS, htp_cuda_sums_bytes(rows, out)); /* the f32 sum */           \
    OWN_LT(b);                                                                                 \
    RUN(cpu()->linear_##sfx(&self->cpu, x, w, b, y, rows, in, out));                           \
  }                                                                                            \
  static htp_kernel_status layer_norm_##sfx(const htp_kernel_env *env, const T *x,             \
                                            const T *gamma, const T *beta, T *y, int64_t rows, \
                                            int64_t dim, float epsilon) {                      \
    BEGIN("layer_norm_" #sfx);                                                                 \
    if (dim < 1) /* as CUDA's: a row of no element has no mean */                             \
      return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked %s: dim %lld < 1", entry_,  \
                             (long long)dim);                                                  \
    DEVICE(x, BYTES(n2(rows, dim)));                                                           \
    DEVICE(gamma, BYTES(dim)); /* both kernels read them */                                    \
    DEVICE(beta, BYTES(dim));                                                                  \
    DEVICE(y, BYTES(n2(rows, dim)));                                                           \
    RUN(cpu()->layer_norm_##sfx(&self->cpu, x, gamma, beta, y, rows, dim, epsilon));           \
  }                                                                                            \
  static htp_kernel_status gelu_##sfx(const htp_kernel_env *env, const T *x, T *y, int64_t n,  \
                                      int32_t tanh_approx) {                                   \
    BEGIN("gelu_" #sfx);                                                                       \
    DEVICE(x, BYTES(n));                                                                       \
    DEVICE(y, BYTES(n));                                                                       \
    RUN(cpu()->gelu_##sfx(&self->cpu, x, y, n, tanh_approx));                                  \
  }                                                                                            \
  static htp_kernel_status add_##sfx(const htp_kernel_env *env, const T *a, const T *b, T *y,  \
                                     int64_t n) {                                              \
    BEGIN("add_" #sfx);                                                                        \
    DEVICE(a, BYTES(n));                                                                       \
    DEVICE(b, BYTES(n));                                                                       \
    DEVICE(y, BYTES(n));                                                                       \
    RUN(cpu()->add_##sfx(&self->cpu, a, b, y, n));                                             \
  }                                                                                            \
  static htp_kernel_status bias_add_##sfx(const htp_kernel_env *env, const T *x,               \
                                          const T *bias, T *y, int64_t rows, int64_t cols) {   \
    BEGIN("bias_add_" #sfx);                                                                   \
    DEVICE(x, BYTES(n2(rows, cols)));                                                          \
    DEVICE(bias, BYTES(cols));                                                                 \
    DEVICE(y, BYTES(n2(rows, cols)));                                                          \
    RUN(cpu()->bias_add_##sfx(&self->cpu, x, bias, y, rows, cols));                            \
  }

/* Whether the CUDA twins of the entries being defined round f32 sums held
 * in their own memory (bf16) or write their outputs directly (f32). */
#define BF16_SUMS 0
ELEMENTWISE_ENTRIES(f32, float, F32)
#undef BF16_SUMS
#define BF16_SUMS 1
ELEMENTWISE_ENTRIES(bf16, htp_bf16, BF16)
#undef BF16_SUMS

/* The attention's scratch is held to the CUDA kernel's formula: a block
 * whose workspace was sized for the CPU fails here as on a GPU. */
#define ATTENTION_ENTRIES(sfx, T, BYTES)                                                       \
  static htp_kernel_status attention_##sfx(                                                    \
      const htp_kernel_env *env, const T *x, const T *wqkv, const T *bqkv, const T *wproj,     \
      const T *bproj, T *y, float *scratch, int64_t scratch_floats, int64_t batch,             \
      int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim) {                \
    BEGIN("attention_" #sfx);                                                                  \
    ATTENTION_SIZES(batch, tokens, model_dim, num_heads, head_dim);                            \
    const int64_t needed =                                                                     \
        htp_cuda_attention_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);      \
    if (needed < 0 || scratch_floats < needed)                                                 \
      return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,                                      \
                             "checked attention_" #sfx ": scratch holds %lld floats, the "     \
                             "CUDA kernel needs %lld (htp_cuda_attention_scratch_floats)",     \
                             (long long)scratch_floats, (long long)needed);                    \
    const int64_t rows = n2(batch, tokens), inner = n2(num_heads, head_dim);                   \
    DEVICE(x, BYTES(n2(rows, model_dim)));                                                     \
    DEVICE(wqkv, BYTES(n3(3, inner, model_dim)));                                              \
    OPTIONAL(bqkv, BYTES(n2(3, inner)));                                                       \
    DEVICE(wproj, BYTES(n2(model_dim, inner)));                                                \
    OPTIONAL(bproj, BYTES(model_dim));                                                         \
    DEVICE(y, BYTES(n2(rows, model_dim)));                                                     \
    DEVICE(scratch, F32(scratch_floats));                                                      \
    if (BF16_SUMS && bqkv) OWN(SUMS, htp_cuda_sums_bytes(rows, n2(3, inner)));                 \
    if (BF16_SUMS && bproj) OWN(SUMS, htp_cuda_sums_bytes(rows, model_dim));                   \
    OWN_LT(bqkv || bproj);                                                                     \
    RUN(cpu()->attention_##sfx(&self->cpu, x, wqkv, bqkv, wproj, bproj, y, scratch,            \
                               scratch_floats, batch, tokens, model_dim, num_heads,            \
                               head_dim));                                                     \
  }                                                                                            \
  static htp_kernel_status attention_heads_##sfx(                                              \
      const htp_kernel_env *env, const T *x, const T *wqkv, const T *bqkv, T *context,         \
      float *scratch, int64_t batch, int64_t tokens, int64_t model_dim, int64_t num_heads,     \
      int64_t head_dim, const int32_t *heads, int64_t count) {                                 \
    BEGIN("attention_heads_" #sfx);                                                            \
    ATTENTION_SIZES(batch, tokens, model_dim, num_heads, head_dim);                            \
    const int64_t rows = n2(batch, tokens), inner = n2(num_heads, head_dim);                   \
    DEVICE(x, BYTES(n2(rows, model_dim)));                                                     \
    DEVICE(wqkv, BYTES(n3(3, inner, model_dim)));                                              \
    OPTIONAL(bqkv, BYTES(n2(3, inner)));                                                       \
    DEVICE(context, BYTES(n2(rows, inner)));                                                   \
    /* One head's q, k, v and one image's scores: the CPU twin's and the CUDA one's. */      \
    DEVICE(scratch, F32(htp__size_add(n3(rows, 3, head_dim), n2(tokens, tokens))));            \
    HOST(heads, IDS(count));                                                                   \
    UNITS(head_dim, heads, count, num_heads);                                                  \
    /* CUDA runs the listed heads as one attention of `count` heads in its own                \
     * scratch, their weights gathered there (kernels/cuda/units.cu). */                      \
    if (count > 0 && rows > 0) {                                                               \
      OWN(HEADS, htp_cuda_heads_bytes(batch, tokens, model_dim, count, head_dim, sizeof(T)));  \
      if (BF16_SUMS && bqkv) OWN(SUMS, htp_cuda_sums_bytes(rows, n3(3, count, head_dim)));     \
      OWN_LT(bqkv);                                                                            \
    }                                                                                          \
    RUN(cpu()->attention_heads_##sfx(&self->cpu, x, wqkv, bqkv, context, scratch, batch,       \
                                     tokens, model_dim, num_heads, head_dim, heads, count));   \
  }                                                                                            \
  static htp_kernel_status mlp_hidden_units_##sfx(                                             \
      const htp_kernel_env *env, const T *x, const T *w1, const T *b1, T *hidden,              \
      int64_t rows, int64_t dim, int64_t hidden_dim, int64_t width, const int32_t *units,      \
      int64_t count, int32_t tanh_approx) {                                                    \
    BEGIN("mlp_hidden_units_" #sfx);                                                           \
    GEMM_SIZES(rows, dim, hidden_dim);                                                         \
    DEVICE(x, BYTES(n2(rows, dim)));                                                           \
    DEVICE(w1, BYTES(n2(hidden_dim, dim)));                                                    \
    OPTIONAL(b1, BYTES(hidden_dim));                                                           \
    DEVICE(hidden, BYTES(n2(rows, hidden_dim)));                                               \
    HOST(units, IDS(count));                                                                   \
    UNITS(width, units, count, width > 0 ? hidden_dim / width : 0);                            \
    /* CUDA's pre-activations of its widest run of units: at most all of them. */             \
    if (BF16_SUMS && count > 0) OWN(SUMS, htp_cuda_sums_bytes(rows, n2(count, width)));        \
    RUN(cpu()->mlp_hidden_units_##sfx(&self->cpu, x, w1, b1, hidden, rows, dim, hidden_dim,    \
                                      width, units, count, tanh_approx));                      \
  }                                                                                            \
  static htp_kernel_status linear_units_##sfx(                                                 \
      const htp_kernel_env *env, const T *a, const T *w, T *y, int64_t rows, int64_t in,       \
      int64_t out, int64_t width, const int32_t *units, int64_t count, int32_t accumulate) {   \
    BEGIN("linear_units_" #sfx);                                                               \
    GEMM_SIZES(rows, in, out);                                                                 \
    DEVICE(a, BYTES(n2(rows, in)));                                                            \
    DEVICE(w, BYTES(n2(out, in)));                                                             \
    DEVICE(y, BYTES(n2(rows, out)));                                                           \
    HOST(units, IDS(count));                                                                   \
    UNITS(width, units, count, width > 0 ? in / width : 0);                                    \
    /* CUDA's bf16 sum in f32, unless one run of units makes y in one GEMM. */               \
    int one_run_ = !accumulate;                                                                \
    for (int64_t i_ = 1; one_run_ && i_ < count; ++i_) one_run_ = units[i_] == units[i_ - 1] + 1; \
    if (BF16_SUMS && count > 0 && rows > 0 && out > 0 && !one_run_)                            \
      OWN(SUMS, htp_cuda_sums_bytes(rows, out));                                               \
    RUN(cpu()->linear_units_##sfx(&self->cpu, a, w, y, rows, in, out, width, units, count,     \
                                  accumulate));                                                \
  }

#define BF16_SUMS 0
ATTENTION_ENTRIES(f32, float, F32)
#undef BF16_SUMS
#define BF16_SUMS 1
ATTENTION_ENTRIES(bf16, htp_bf16, BF16)
#undef BF16_SUMS

/* The fused residual entries, as CUDA has them: the checked op, then the
 * checked add on y in place, after r is checked to lie in device memory
 * and not to overlap y (the fused kernel reads r while it writes y). */
static htp_kernel_status residual_problem(const htp_kernel_env *env, const char *entry,
                                          const void *r, const void *y, int64_t bytes) {
  void *r_host = NULL, *y_host = NULL;
  htp_kernel_status s = htp__checked_span(env, entry, "r", r, bytes, 0, &r_host);
  if (s == HTP_KERNEL_OK) s = htp__checked_span(env, entry, "y", y, bytes, 0, &y_host);
  if (s != HTP_KERNEL_OK) return s;
  const char *rb = r_host, *yb = y_host;
  if (rb < yb + bytes && yb < rb + bytes)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked %s: r and y overlap", entry);
  return HTP_KERNEL_OK;
}

#define RESIDUAL_ENTRIES(sfx, T, BYTES)                                                        \
  static htp_kernel_status linear_residual_##sfx(const htp_kernel_env *env, const T *x,        \
                                                 const T *w, const T *b, const T *r, T *y,     \
                                                 int64_t rows, int64_t in, int64_t out) {      \
    const int64_t n_ = n2(rows, out);                                                          \
    htp_kernel_status s_ = residual_problem(env, "linear_residual_" #sfx, r, y, BYTES(n_));    \
    if (s_ == HTP_KERNEL_OK) s_ = linear_##sfx(env, x, w, b, y, rows, in, out);                \
    return s_ == HTP_KERNEL_OK ? add_##sfx(env, y, r, y, n_) : s_;                             \
  }                                                                                            \
  static htp_kernel_status attention_residual_##sfx(                                           \
      const htp_kernel_env *env, const T *x, const T *wqkv, const T *bqkv, const T *wproj,     \
      const T *bproj, const T *r, T *y, float *scratch, int64_t scratch_floats, int64_t batch, \
      int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim) {                \
    const int64_t n_ = n3(batch, tokens, model_dim);                                           \
    htp_kernel_status s_ = residual_problem(env, "attention_residual_" #sfx, r, y, BYTES(n_)); \
    if (s_ == HTP_KERNEL_OK)                                                                   \
      s_ = attention_##sfx(env, x, wqkv, bqkv, wproj, bproj, y, scratch, scratch_floats,       \
                           batch, tokens, model_dim, num_heads, head_dim);                     \
    return s_ == HTP_KERNEL_OK ? add_##sfx(env, y, r, y, n_) : s_;                             \
  }                                                                                            \
  static htp_kernel_status bias_add_residual_##sfx(const htp_kernel_env *env, const T *x,      \
                                                   const T *bias, const T *r, T *y,            \
                                                   int64_t rows, int64_t cols) {               \
    const int64_t n_ = n2(rows, cols);                                                         \
    htp_kernel_status s_ = residual_problem(env, "bias_add_residual_" #sfx, r, y, BYTES(n_));  \
    if (s_ == HTP_KERNEL_OK) s_ = bias_add_##sfx(env, x, bias, y, rows, cols);                 \
    return s_ == HTP_KERNEL_OK ? add_##sfx(env, y, r, y, n_) : s_;                             \
  }

RESIDUAL_ENTRIES(f32, float, F32)
RESIDUAL_ENTRIES(bf16, htp_bf16, BF16)

/* The same-device reduction: x is a HOST array of device pointers. */
enum { MAX_PARTS = 256 };
#define SUM_ENTRY(sfx, T, BYTES)                                                               \
  static htp_kernel_status sum_##sfx(const htp_kernel_env *env, const T *const *x,             \
                                     int32_t parts, T *y, int64_t n) {                         \
    BEGIN("sum_" #sfx);                                                                        \
    if (parts < 1 || parts > MAX_PARTS)                                                        \
      return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,                                      \
                             "checked sum_" #sfx ": %d parts (1 to %d)", (int)parts,           \
                             (int)MAX_PARTS);                                                  \
    HOST(x, (int64_t)parts * (int64_t)sizeof *x);                                              \
    const T *host_parts[MAX_PARTS];                                                            \
    for (int32_t p = 0; p < parts; ++p) {                                                      \
      void *host_;                                                                             \
      char name_[32];                                                                          \
      snprintf(name_, sizeof name_, "x[%d]", (int)p);                                          \
      checked_ = htp__checked_span(env, entry_, name_, x[p], BYTES(n), 0, &host_);             \
      if (checked_ != HTP_KERNEL_OK) return checked_;                                          \
      host_parts[p] = host_;                                                                   \
    }                                                                                          \
    DEVICE(y, BYTES(n));                                                                       \
    if (n > 0) OWN(STAGING, htp_cuda_staging_bytes(parts * (int64_t)sizeof *x, 0));            \
    RUN(cpu()->sum_##sfx(&self->cpu, host_parts, parts, y, n));                                \
  }

SUM_ENTRY(f32, float, F32)
SUM_ENTRY(bf16, htp_bf16, BF16)

/* The fused linear and GELU, as CUDA has both: bf16 the CPU's fused one, so
 * that the checked device's numbers stay the CPU's; f32 the CPU's linear
 * then its GELU in place (the CPU table has no fused f32 entry, and the
 * runtime runs exactly that pair for it), so that the runtime takes the
 * fused entry here as on a GPU. */
static htp_kernel_status linear_then_gelu_f32(const htp_kernel_env *cpu_env, const float *x,
                                              const float *w, const float *b, float *y,
                                              int64_t rows, int64_t in, int64_t out,
                                              int32_t tanh_approx) {
  htp_kernel_status s = cpu()->linear_f32(cpu_env, x, w, b, y, rows, in, out);
  return s == HTP_KERNEL_OK ? cpu()->gelu_f32(cpu_env, y, y, rows * out, tanh_approx) : s;
}

static htp_kernel_status linear_gelu_f32(const htp_kernel_env *env, const float *x,
                                         const float *w, const float *b, float *y, int64_t rows,
                                         int64_t in, int64_t out, int32_t tanh_approx) {
  BEGIN("linear_gelu_f32");
  GEMM_SIZES(rows, in, out);
  DEVICE(x, F32(n2(rows, in)));
  DEVICE(w, F32(n2(out, in)));
  OPTIONAL(b, F32(out));
  DEVICE(y, F32(n2(rows, out)));
  /* CUDA's twin: the MLP unit kernel, its GEMM straight into y (no cuBLASLt). */
  RUN(linear_then_gelu_f32(&self->cpu, x, w, b, y, rows, in, out, tanh_approx));
}

static htp_kernel_status linear_gelu_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                          const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                          int64_t rows, int64_t in, int64_t out,
                                          int32_t tanh_approx) {
  BEGIN("linear_gelu_bf16");
  GEMM_SIZES(rows, in, out);
  DEVICE(x, BF16(n2(rows, in)));
  DEVICE(w, BF16(n2(out, in)));
  OPTIONAL(b, BF16(out));
  DEVICE(y, BF16(n2(rows, out)));
  OWN(SUMS, htp_cuda_sums_bytes(rows, out)); /* CUDA's GEMM into f32 before GELU */
  RUN(cpu()->linear_gelu_bf16(&self->cpu, x, w, b, y, rows, in, out, tanh_approx));
}

/* ----- Copies, memory, the stream ------------------------------------------- */

static htp_kernel_status copy(const htp_kernel_env *env, void *dst, const void *src,
                              size_t bytes) {
  BEGIN_QUEUED("copy");
  if (bytes > (size_t)INT64_MAX) return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked copy: %zu bytes", bytes);
  DEVICE(dst, (int64_t)bytes);
  DEVICE(src, (int64_t)bytes);
  if (bytes) queue_copy(self, (queued_copy){dst, src, bytes, bytes, bytes, 1});
  enqueued(self, now());
  return HTP_KERNEL_OK;
}

/* The span from the first row's start to the last row's end must lie in
 * one allocation, at each end. */
static htp_kernel_status copy_2d(const htp_kernel_env *env, void *dst, size_t dst_pitch,
                                 const void *src, size_t src_pitch, size_t row_bytes,
                                 size_t rows) {
  BEGIN_QUEUED("copy_2d");
  if (rows == 0 || row_bytes == 0) return HTP_KERNEL_OK;
  if (dst_pitch < row_bytes || src_pitch < row_bytes)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked copy_2d: a pitch (%zu, %zu) is "
                           "below the row's %zu bytes", dst_pitch, src_pitch, row_bytes);
  const int64_t dst_span = htp__size_add(n2((int64_t)rows - 1, (int64_t)dst_pitch),
                                         (int64_t)row_bytes);
  const int64_t src_span = htp__size_add(n2((int64_t)rows - 1, (int64_t)src_pitch),
                                         (int64_t)row_bytes);
  if (rows > (size_t)INT64_MAX || dst_pitch > (size_t)INT64_MAX || src_pitch > (size_t)INT64_MAX ||
      dst_span < 0 || src_span < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked copy_2d: %zu rows of pitch %zu "
                           "and %zu overflow", rows, dst_pitch, src_pitch);
  DEVICE(dst, dst_span);
  DEVICE(src, src_span);
  queue_copy(self, (queued_copy){dst, src, dst_pitch, src_pitch, row_bytes, rows});
  enqueued(self, now());
  return HTP_KERNEL_OK;
}

static htp_kernel_status zero(const htp_kernel_env *env, void *dst, size_t bytes) {
  BEGIN("zero");
  if (bytes > (size_t)INT64_MAX) return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked zero: %zu bytes", bytes);
  DEVICE(dst, (int64_t)bytes);
  RUN(cpu()->zero(&self->cpu, dst, bytes));
}

static htp_kernel_status alloc(const htp_kernel_env *env, size_t bytes, void **out) {
  if (!object_of(env, "alloc")) return HTP_KERNEL_ERR_SYSTEM;
  return htp__checked_alloc(env, bytes, out);
}

static htp_kernel_status release(const htp_kernel_env *env, void *ptr) {
  if (!object_of(env, "release")) return HTP_KERNEL_ERR_SYSTEM;
  run_every_queue(); /* cudaFree waits for the device: every rank's stream */
  return htp__checked_release(env, ptr);
}

/* Host <-> device: after the queued work, done when they return. */
static htp_kernel_status to_device(const htp_kernel_env *env, void *dst, const void *host_src,
                                   size_t bytes) {
  BEGIN("to_device");
  if (bytes > (size_t)INT64_MAX) return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked to_device: %zu bytes", bytes);
  DEVICE(dst, (int64_t)bytes);
  HOST(host_src, (int64_t)bytes);
  wait_stream(self);
  if (bytes) memcpy(dst, host_src, bytes);
  return HTP_KERNEL_OK;
}

static htp_kernel_status to_host(const htp_kernel_env *env, void *host_dst, const void *src,
                                 size_t bytes) {
  BEGIN("to_host");
  if (bytes > (size_t)INT64_MAX) return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked to_host: %zu bytes", bytes);
  HOST(host_dst, (int64_t)bytes);
  DEVICE(src, (int64_t)bytes);
  wait_stream(self);
  if (bytes) memcpy(host_dst, src, bytes);
  return HTP_KERNEL_OK;
}

static htp_kernel_status synchronize(const htp_kernel_env *env) {
  BEGIN("synchronize");
  (void)entry_, (void)checked_;
  wait_stream(self);
  return HTP_KERNEL_OK;
}

/* An event: the time the stream reaches this point of its queue. */
static htp_kernel_status mark(const htp_kernel_env *env, int32_t timer, int32_t which) {
  BEGIN("mark");
  (void)entry_, (void)checked_;
  if (timer < 0 || timer >= HTP_KERNEL_TIMERS || (which != 0 && which != 1))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked mark %d of timer %d: needs mark 0 or 1 of a timer in [0, %d)",
                           (int)which, (int)timer, HTP_KERNEL_TIMERS);
  int *recorded = &self->recorded[timer];
  if (which == 0 && (*recorded & 1))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked mark 0 of timer %d: recorded again before its elapsed was "
                           "read: two timers share one pair of marks",
                           (int)timer);
  if (which == 1 && !(*recorded & 1))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked mark 1 of timer %d: mark 0 was not recorded since the last "
                           "elapsed",
                           (int)timer);
  const double t = now();
  self->marks[timer][which] = self->ready > t ? self->ready : t;
  *recorded |= 1 << which;
  return HTP_KERNEL_OK;
}

static htp_kernel_status elapsed(const htp_kernel_env *env, int32_t timer, double *seconds) {
  BEGIN("elapsed");
  (void)entry_, (void)checked_;
  if (!seconds || timer < 0 || timer >= HTP_KERNEL_TIMERS || self->recorded[timer] != 3)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked elapsed of timer %d: needs a result pointer and marks 0 and "
                           "1 of that timer recorded since its last elapsed",
                           (int)timer);
  const double *marks = self->marks[timer];
  wait_until(marks[1]);
  *seconds = marks[1] - marks[0];
  self->recorded[timer] = 0;
  return HTP_KERNEL_OK;
}

/* ----- Training entries (f32) ----------------------------------------------- */

static htp_kernel_status linear_backward(const htp_kernel_env *env, const float *x,
                                         const float *w, const float *dy, float *dx, float *dw,
                                         float *db, int64_t rows, int64_t in, int64_t out) {
  BEGIN("linear_backward_f32");
  DEVICE(x, F32(n2(rows, in)));
  SPAN(w, F32(n2(out, in)), dx == NULL); /* read for dx only */
  DEVICE(dy, F32(n2(rows, out)));
  OPTIONAL(dx, F32(n2(rows, in)));
  OPTIONAL(dw, F32(n2(out, in)));
  OPTIONAL(db, F32(out));
  RUN(cpu()->linear_backward_f32(&self->cpu, x, w, dy, dx, dw, db, rows, in, out));
}

static htp_kernel_status layer_norm_backward(const htp_kernel_env *env, const float *x,
                                             const float *gamma, const float *dy, float *dx,
                                             float *dgamma, float *dbeta, int64_t rows,
                                             int64_t dim, float epsilon) {
  BEGIN("layer_norm_backward_f32");
  DEVICE(x, F32(n2(rows, dim)));
  OPTIONAL(gamma, F32(dim));
  DEVICE(dy, F32(n2(rows, dim)));
  OPTIONAL(dx, F32(n2(rows, dim)));
  OPTIONAL(dgamma, F32(dim));
  OPTIONAL(dbeta, F32(dim));
  if (rows > 0 && dim > 0 && (dgamma || dbeta)) OWN(SUMS, htp_cuda_doubles_bytes(n2(rows, 2)));
  RUN(cpu()->layer_norm_backward_f32(&self->cpu, x, gamma, dy, dx, dgamma, dbeta, rows, dim,
                                     epsilon));
}

static htp_kernel_status gelu_backward(const htp_kernel_env *env, const float *x,
                                       const float *dy, float *dx, int64_t n,
                                       int32_t tanh_approx) {
  BEGIN("gelu_backward_f32");
  DEVICE(x, F32(n));
  DEVICE(dy, F32(n));
  OPTIONAL(dx, F32(n)); /* NULL: not wanted (the table's convention) */
  RUN(cpu()->gelu_backward_f32(&self->cpu, x, dy, dx, n, tanh_approx));
}

static htp_kernel_status attention_backward(
    const htp_kernel_env *env, const float *x, const float *wqkv, const float *bqkv,
    const float *wproj, const float *bproj, const float *dy, float *dx, float *dwqkv,
    float *dbqkv, float *dwproj, float *dbproj, float *scratch, int64_t scratch_floats,
    int64_t batch, int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  BEGIN("attention_backward_f32");
  const int64_t needed = htp_cuda_attention_backward_scratch_floats(batch, tokens, model_dim,
                                                                    num_heads, head_dim);
  if (needed < 0 || scratch_floats < needed)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked attention_backward_f32: scratch holds %lld floats, the CUDA "
                           "kernel needs %lld",
                           (long long)scratch_floats, (long long)needed);
  const int64_t rows = n2(batch, tokens), inner = n2(num_heads, head_dim);
  DEVICE(x, F32(n2(rows, model_dim)));
  DEVICE(wqkv, F32(n3(3, inner, model_dim)));
  OPTIONAL(bqkv, F32(n2(3, inner)));
  DEVICE(wproj, F32(n2(model_dim, inner)));
  OPTIONAL(bproj, F32(model_dim));
  DEVICE(dy, F32(n2(rows, model_dim)));
  OPTIONAL(dx, F32(n2(rows, model_dim)));
  OPTIONAL(dwqkv, F32(n3(3, inner, model_dim)));
  OPTIONAL(dbqkv, F32(n2(3, inner)));
  OPTIONAL(dwproj, F32(n2(model_dim, inner)));
  OPTIONAL(dbproj, F32(model_dim));
  DEVICE(scratch, F32(scratch_floats));
  RUN(cpu()->attention_backward_f32(&self->cpu, x, wqkv, bqkv, wproj, bproj, dy, dx, dwqkv,
                                    dbqkv, dwproj, dbproj, scratch, scratch_floats, batch,
                                    tokens, model_dim, num_heads, head_dim));
}

static htp_kernel_status softmax_cross_entropy(const htp_kernel_env *env, const float *logits,
                                               const float *targets, float *loss,
                                               float *dlogits, int64_t rows, int64_t classes) {
  BEGIN("softmax_cross_entropy_f32");
  DEVICE(logits, F32(n2(rows, classes)));
  DEVICE(targets, F32(n2(rows, classes)));
  OPTIONAL(loss, F32(1));
  OPTIONAL(dlogits, F32(n2(rows, classes)));
  if (loss) OWN(SUMS, htp_cuda_doubles_bytes(rows));
  RUN(cpu()->softmax_cross_entropy_f32(&self->cpu, logits, targets, loss, dlogits, rows,
                                       classes));
}

static htp_kernel_status sgd_momentum(const htp_kernel_env *env, float *w, const float *g,
                                      float *m, int64_t n, float lr, float momentum,
                                      float weight_decay, int64_t step) {
  BEGIN("sgd_momentum_f32");
  DEVICE(w, F32(n));
  DEVICE(g, F32(n));
  OPTIONAL(m, F32(n));
  RUN(cpu()->sgd_momentum_f32(&self->cpu, w, g, m, n, lr, momentum, weight_decay, step));
}

static htp_kernel_status adamw(const htp_kernel_env *env, float *w, const float *g, float *m,
                               float *v, int64_t n, float lr, float beta1, float beta2,
                               float epsilon, float weight_decay, int64_t step) {
  BEGIN("adamw_f32");
  DEVICE(w, F32(n));
  DEVICE(g, F32(n));
  DEVICE(m, F32(n));
  DEVICE(v, F32(n));
  RUN(cpu()->adamw_f32(&self->cpu, w, g, m, v, n, lr, beta1, beta2, epsilon, weight_decay,
                       step));
}

static htp_kernel_status patchify(const htp_kernel_env *env, const float *images,
                                  float *patches, int64_t batch, int64_t channels,
                                  int64_t height, int64_t width, int64_t patch) {
  BEGIN("patchify_f32");
  const int64_t elements = n2(n3(batch, channels, height), width);
  DEVICE(images, F32(elements));
  DEVICE(patches, F32(elements));
  RUN(cpu()->patchify_f32(&self->cpu, images, patches, batch, channels, height, width, patch));
}

static htp_kernel_status embed_tokens(const htp_kernel_env *env, const float *patches,
                                      const float *cls, const float *pos, float *y,
                                      int64_t batch, int64_t patches_per_image, int64_t dim) {
  BEGIN("embed_tokens_f32");
  const int64_t tokens = htp__size_add(patches_per_image, 1);
  DEVICE(patches, F32(n3(batch, patches_per_image, dim)));
  DEVICE(cls, F32(dim));
  DEVICE(pos, F32(n2(tokens, dim)));
  DEVICE(y, F32(n3(batch, tokens, dim)));
  RUN(cpu()->embed_tokens_f32(&self->cpu, patches, cls, pos, y, batch, patches_per_image, dim));
}

static htp_kernel_status cls_token(const htp_kernel_env *env, const float *x, float *y,
                                   int64_t batch, int64_t tokens, int64_t dim) {
  BEGIN("cls_token_f32");
  DEVICE(x, F32(n3(batch, tokens, dim)));
  DEVICE(y, F32(n2(batch, dim)));
  RUN(cpu()->cls_token_f32(&self->cpu, x, y, batch, tokens, dim));
}

static htp_kernel_status row_sum(const htp_kernel_env *env, const float *x, float *y,
                                 int64_t rows, int64_t cols) {
  BEGIN("row_sum_f32");
  DEVICE(x, F32(n2(rows, cols)));
  DEVICE(y, F32(cols));
  RUN(cpu()->row_sum_f32(&self->cpu, x, y, rows, cols));
}

static htp_kernel_status embed_tokens_backward(const htp_kernel_env *env, const float *dy,
                                               float *dpatches, float *dcls, float *dpos,
                                               int64_t batch, int64_t patches_per_image,
                                               int64_t dim) {
  BEGIN("embed_tokens_backward_f32");
  const int64_t tokens = htp__size_add(patches_per_image, 1);
  DEVICE(dy, F32(n3(batch, tokens, dim)));
  OPTIONAL(dpatches, F32(n3(batch, patches_per_image, dim)));
  OPTIONAL(dcls, F32(dim));
  OPTIONAL(dpos, F32(n2(tokens, dim)));
  RUN(cpu()->embed_tokens_backward_f32(&self->cpu, dy, dpatches, dcls, dpos, batch,
                                       patches_per_image, dim));
}

static htp_kernel_status cls_token_backward(const htp_kernel_env *env, const float *dy,
                                            float *dx, int64_t batch, int64_t tokens,
                                            int64_t dim) {
  BEGIN("cls_token_backward_f32");
  DEVICE(dy, F32(n2(batch, dim)));
  DEVICE(dx, F32(n3(batch, tokens, dim)));
  RUN(cpu()->cls_token_backward_f32(&self->cpu, dy, dx, batch, tokens, dim));
}

static htp_kernel_status own_memory(const htp_kernel_env *env, uint64_t *bytes) {
  BEGIN("own_memory");
  (void)entry_, (void)checked_;
  const int64_t total = htp_cuda_own_total(&self->own);
  if (!bytes || total < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked own_memory: %s",
                           bytes ? "a booked size overflowed" : "no result pointer");
  *bytes = (uint64_t)total;
  return HTP_KERNEL_OK;
}

/* Not a stream entry (nothing is enqueued): the CPU kernels' precision,
 * which is how the checked device computes every product. */
static htp_kernel_status set_matmul_precision(const htp_kernel_env *env, int32_t precision) {
  checked_env *self = object_of(env, "set_matmul_precision");
  if (!self) return HTP_KERNEL_ERR_SYSTEM;
  return cpu()->set_matmul_precision(&self->cpu, precision);
}

static const htp_kernel_table CHECKED_TABLE = {
    .name = "checked",
    .device = HTP_KERNEL_DEVICE_CHECKED,
    .linear_f32 = linear_f32,
    .layer_norm_f32 = layer_norm_f32,
    .gelu_f32 = gelu_f32,
    .add_f32 = add_f32,
    .bias_add_f32 = bias_add_f32,
    .attention_f32 = attention_f32,
    .attention_scratch_floats = htp_cuda_attention_scratch_floats,
    .attention_heads_f32 = attention_heads_f32,
    .mlp_hidden_units_f32 = mlp_hidden_units_f32,
    .linear_units_f32 = linear_units_f32,
    .copy = copy,
    .copy_2d = copy_2d,
    .sum_f32 = sum_f32,
    .linear_bf16 = linear_bf16,
    .linear_gelu_f32 = linear_gelu_f32,
    .linear_gelu_bf16 = linear_gelu_bf16,
    .linear_residual_f32 = linear_residual_f32,
    .linear_residual_bf16 = linear_residual_bf16,
    .attention_residual_f32 = attention_residual_f32,
    .attention_residual_bf16 = attention_residual_bf16,
    .bias_add_residual_f32 = bias_add_residual_f32,
    .bias_add_residual_bf16 = bias_add_residual_bf16,
    .layer_norm_bf16 = layer_norm_bf16,
    .gelu_bf16 = gelu_bf16,
    .add_bf16 = add_bf16,
    .bias_add_bf16 = bias_add_bf16,
    .attention_bf16 = attention_bf16,
    .attention_heads_bf16 = attention_heads_bf16,
    .mlp_hidden_units_bf16 = mlp_hidden_units_bf16,
    .linear_units_bf16 = linear_units_bf16,
    .sum_bf16 = sum_bf16,
    .alloc = alloc,
    .release = release,
    .to_device = to_device,
    .to_host = to_host,
    .synchronize = synchronize,
    .mark = mark,
    .elapsed = elapsed,
    .linear_backward_f32 = linear_backward,
    .layer_norm_backward_f32 = layer_norm_backward,
    .gelu_backward_f32 = gelu_backward,
    .attention_backward_f32 = attention_backward,
    .attention_backward_scratch_floats = htp_cuda_attention_backward_scratch_floats,
    .softmax_cross_entropy_f32 = softmax_cross_entropy,
    .sgd_momentum_f32 = sgd_momentum,
    .adamw_f32 = adamw,
    .patchify_f32 = patchify,
    .embed_tokens_f32 = embed_tokens,
    .cls_token_f32 = cls_token,
    .row_sum_f32 = row_sum,
    .embed_tokens_backward_f32 = embed_tokens_backward,
    .cls_token_backward_f32 = cls_token_backward,
    .zero = zero,
    .memory = htp__checked_memory,
    .own_memory = own_memory,
    .set_matmul_precision = set_matmul_precision,
};

const htp_kernel_table *htp_checked_kernel_table(void) { return &CHECKED_TABLE; }

enum { DEFAULT_LATENCY_US = 200 };

/* The emulated GPU's SMs, as an H200 reported them (2026-11-27): 132, of
 * which 120 partition into 15 groups of 8. Partitions of the ranks that
 * share it are disjoint: groups taken are counted process-wide (the
 * memory is the process's too). */
enum { CHECKED_SMS = 132, CHECKED_SM_STEP = 8, CHECKED_SM_GROUPS = 15 };
static pthread_mutex_t partition_lock = PTHREAD_MUTEX_INITIALIZER;
static int groups_taken;

/* sm_count's groups, taken for a rank: 0, or an error as the CUDA
 * device's (kernels/cuda/green.c). */
static htp_kernel_status take_partition(const htp_kernel_env *env, int sm_count, int *groups) {
  char why[512];
  if (htp_sm_count_check("the checked device", sm_count, CHECKED_SMS, CHECKED_SM_STEP,
                         CHECKED_SM_GROUPS, why, sizeof why))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked: %s", why);
  const int wanted = sm_count / CHECKED_SM_STEP;
  pthread_mutex_lock(&partition_lock);
  const int free_groups = CHECKED_SM_GROUPS - groups_taken;
  if (free_groups >= wanted) groups_taken += wanted;
  pthread_mutex_unlock(&partition_lock);
  if (free_groups < wanted)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked: %d SMs of the checked device: only %d of its %d "
                           "partitionable SMs are free (the other ranks' partitions hold %d): "
                           "the SM counts of the ranks sharing it add up to more than the "
                           "device",
                           sm_count, free_groups * CHECKED_SM_STEP,
                           CHECKED_SM_GROUPS * CHECKED_SM_STEP,
                           (CHECKED_SM_GROUPS - free_groups) * CHECKED_SM_STEP);
  *groups = wanted;
  return HTP_KERNEL_OK;
}

int htp_checked_device_sm_count(void) { return CHECKED_SMS; }

static void release_partition(int groups) {
  pthread_mutex_lock(&partition_lock);
  groups_taken -= groups;
  pthread_mutex_unlock(&partition_lock);
}

htp_kernel_status htp_checked_kernel_env_create(htp_kernel_env *env, char *error,
                                                size_t error_size) {
  return htp_checked_kernel_env_create_on(0, env, error, error_size);
}

htp_kernel_status htp_checked_kernel_env_create_on(int sm_count, htp_kernel_env *env,
                                                   char *error, size_t error_size) {
  if (!env) return HTP_KERNEL_ERR_INVALID;
  htp_kernel_env_init(env, error, error_size);
  if (sm_count < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked: %d SMs; a count is >= 0 (0: the whole device)", sm_count);
  double latency_us = DEFAULT_LATENCY_US;
  const char *text = getenv("HTP_CHECKED_LATENCY_US");
  if (text && *text) {
    char *end = NULL;
    errno = 0;
    latency_us = strtod(text, &end);
    if (errno || end == text || *end || !(latency_us >= 0 && latency_us <= 1e6))
      return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                             "checked: HTP_CHECKED_LATENCY_US is '%s'; use microseconds in "
                             "[0, 1e6]",
                             text);
  }
  int groups = 0;
  if (sm_count > 0) {
    htp_kernel_status taken = take_partition(env, sm_count, &groups);
    if (taken != HTP_KERNEL_OK) return taken;
  }
  checked_env *self = calloc(1, sizeof *self);
  if (!self) {
    release_partition(groups);
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "checked: out of memory for the "
                                                      "environment");
  }
  htp_kernel_status rc = htp_cpu_kernel_env_create(&self->cpu, error, error_size);
  if (rc != HTP_KERNEL_OK) {
    release_partition(groups);
    free(self);
    return rc;
  }
  self->sm_groups = groups;
  self->latency = 1e-6 * latency_us;
  self->ready = now();
  pthread_mutex_init(&self->queue_lock, NULL);
  pthread_mutex_lock(&envs_lock);
  self->next = all_envs;
  all_envs = self;
  pthread_mutex_unlock(&envs_lock);
  env->kernels = self;
  return HTP_KERNEL_OK;
}

void htp_checked_kernel_env_destroy(htp_kernel_env *env) {
  if (!env || !env->kernels) return;
  checked_env *self = env->kernels;
  pthread_mutex_lock(&envs_lock);
  for (checked_env **at = &all_envs; *at; at = &(*at)->next)
    if (*at == self) {
      *at = self->next;
      break;
    }
  pthread_mutex_unlock(&envs_lock);
  run_queued(self);
  pthread_mutex_destroy(&self->queue_lock);
  free(self->queued);
  htp_cpu_kernel_env_destroy(&self->cpu);
  release_partition(self->sm_groups);
  free(self);
  env->kernels = NULL;
}
