/*===- kernels/cpu/threads.c - Thread counts and the kernels' thread pool --===*
 *
 * Only the kernels know which BLAS computes their GEMMs; an executor that
 * gives each rank its share of the cores sets BLAS's threads through here.
 * The kernels' own loops (layer norm, GELU, attention, ...) and their GEMMs
 * (split by rows, each part a single-threaded BLAS call) share one pool of
 * that many threads.
 *
 * The pool: a parallel loop is cut into chunks that the caller and the
 * workers claim from one atomic counter, and the caller waits only for
 * chunks someone has claimed. A worker that wakes late (the machine is busy,
 * or BLAS's own threads hold the cores) finds nothing left and goes back to
 * sleep, instead of holding everyone at a barrier as a fork-join team would.
 * The counter carries the job's generation in its high half, so a stale
 * worker can never claim a chunk of a later job. One job at a time: a second
 * caller (another rank thread) finds the pool busy and runs its loop alone.
 * A caller closes the counter (a generation of its own with no chunk left)
 * before it writes the job: without that, a worker still holding the last
 * job's generation could claim "the next chunk" of it against the new job's
 * count and run it with the new job's half-written fields.
 *
 * The workers are joined at exit (an atexit handler registered when the
 * first starts): a closed generation with `stopping` set wakes them, and
 * each returns instead of claiming. A process that exits while a job runs,
 * or a child forked after they started, leaves them alone.
 *===----------------------------------------------------------------------===*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "kernels/htp_kernels.h"
#include "kernels/htp_kernel_table.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef HTP_BLAS_ONEDNN
#include "kernels/cpu/onednn.h"
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

/* The kernels' thread count; 0 until set or first read. BLAS itself runs
 * single-threaded once the kernels use it: its pthread server's workers
 * spin (yielding) for a long while after every call and held the cores the
 * pool's workers needed, so the kernels split GEMMs over their own pool
 * instead (htp__sgemm), and one set of threads serves everything. */
static _Atomic int kernel_threads;

enum { MAX_WORKERS = 63, SPIN_CHECKS = 20000 };

void htp_cpu_set_blas_threads(int threads) {
  /* More threads than the pool has workers would only split the work into
   * parts that queue: capped (and reported so). */
  if (threads > MAX_WORKERS + 1)
    threads = MAX_WORKERS + 1;
  if (threads >= 1) {
    atomic_store(&kernel_threads, threads);
#if defined(HTP_BLAS_OPENBLAS) && !defined(HTP_BLAS_ONEDNN)
    openblas_set_num_threads(1);
#endif /* other BLASes (BLIS) are linked in their serial build; oneDNN's
        * OpenMP threads are held to one per calling thread (one_gemm) */
  }
}

int htp_cpu_threads_from_env(const char **name, const char **bad) {
  static const char *const vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                     "BLIS_NUM_THREADS", "OMP_NUM_THREADS"};
  if (name) *name = NULL;
  if (bad) *bad = NULL;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; ++i) {
    const char *text = getenv(vars[i]);
    if (!text || !text[0]) continue;
    char *end = NULL;
    errno = 0;
    const long value = strtol(text, &end, 10);
    if (errno == 0 && *end == '\0' && value >= 1 && value <= 1024) { /* a count, nothing else */
      if (name) *name = vars[i];
      return (int)value;
    }
    if (bad && !*bad) *bad = vars[i];
  }
  return 0;
}

int htp_cpu_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores >= 1 ? (int)(cores > 1024 ? 1024 : cores) : 1;
}

#if !defined(HTP_BLAS_OPENBLAS) || defined(HTP_BLAS_ONEDNN)
/* What OpenBLAS would answer, for a BLAS that has no such call: the
 * environment's count, else every core this process may run on. */
static int default_threads(void) {
  const int given = htp_cpu_threads_from_env(NULL, NULL);
  return given ? given : htp_cpu_cores();
}
#endif

int htp_cpu_blas_threads(void) { return htp__threads(); }

int htp__threads(void) {
  int threads = atomic_load(&kernel_threads);
  if (threads < 1) {
    /* Not set: what BLAS would have used (its variable, or every core),
     * taken over once. */
#if defined(HTP_BLAS_OPENBLAS) && !defined(HTP_BLAS_ONEDNN)
    threads = openblas_get_num_threads();
#else
    threads = default_threads();
#endif
    if (threads < 1)
      threads = 1;
    htp_cpu_set_blas_threads(threads);
  }
  return threads;
}

/* The chunk index of a closed counter: above any job's chunk count. */
#define CLOSED UINT64_C(0xFFFFFFFF)

static struct {
  pthread_mutex_t busy;       /* held by the caller of the running job */
  pthread_mutex_t wake_lock;  /* with wake: sleeping workers */
  pthread_cond_t wake;
  int workers;                /* started so far (only grows until exit) */
  pthread_t threads[MAX_WORKERS];
  pid_t owner;                /* the process that started them */
  _Atomic int stopping;       /* set at exit: workers return, jobs run serially */
  /* (generation << 32) | next unclaimed chunk */
  _Atomic uint64_t state;
  _Atomic int64_t done;       /* chunks finished in this generation */
  _Atomic int allowed;        /* workers with index < allowed take part */
  /* The job, written before state publishes its generation. */
  htp__chunk_fn fn;
  void *ctx;
  int64_t n, grain;
  _Atomic int64_t chunks;   /* atomic: a stale worker may glance at it */
} pool = {.busy = PTHREAD_MUTEX_INITIALIZER,
          .wake_lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER};

/* Claims and runs chunks of generation `generation` until none are left. */
static void run_chunks(uint32_t generation) {
  uint64_t state = atomic_load(&pool.state);
  for (;;) {
    if ((uint32_t)(state >> 32) != generation)
      return;
    int64_t chunk = (int64_t)(uint32_t)state;
    /* pool.chunks may already be a later job's; then the counter has moved
     * on (closed) and the claim below fails. */
    if (chunk >= pool.chunks)
      return;
    if (!atomic_compare_exchange_weak(&pool.state, &state, state + 1))
      continue;
    /* The claim succeeded, so this generation cannot end before the chunk is
     * done: the job fields are still this generation's. */
    int64_t begin = chunk * pool.grain;
    int64_t end = begin + pool.grain < pool.n ? begin + pool.grain : pool.n;
    pool.fn(pool.ctx, begin, end);
    atomic_fetch_add(&pool.done, 1);
    state = atomic_load(&pool.state);
  }
}

static void *worker_main(void *arg) {
  const int index = (int)(intptr_t)arg;
  uint32_t seen = (uint32_t)(atomic_load(&pool.state) >> 32);
  for (;;) {
    uint32_t generation = seen;
    for (int i = 0; i < SPIN_CHECKS && generation == seen; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      generation = (uint32_t)(atomic_load(&pool.state) >> 32);
    }
    if (generation == seen) {
      /* `stopping` too: a worker that started late may have taken the stop's
       * own generation as the one it has seen. */
      pthread_mutex_lock(&pool.wake_lock);
      while ((generation = (uint32_t)(atomic_load(&pool.state) >> 32)) == seen &&
             !atomic_load(&pool.stopping))
        pthread_cond_wait(&pool.wake, &pool.wake_lock);
      pthread_mutex_unlock(&pool.wake_lock);
    }
    seen = generation;
    if (atomic_load(&pool.stopping))
      return NULL;
    if (index < atomic_load(&pool.allowed))
      run_chunks(generation);
  }
}

/* At exit: wakes the workers with a closed generation and `stopping` set,
 * and joins them, so no thread (nor its stack) outlives the process's
 * teardown. Skipped where a job is running (busy held: a rank thread still
 * computing while another exits) and in a forked child, which has none of
 * the parent's threads. Jobs after this run on their caller alone. */
static void stop_workers(void) {
  if (pool.owner != getpid() || pthread_mutex_trylock(&pool.busy) != 0)
    return;
  atomic_store(&pool.stopping, 1);
  const uint32_t closed = (uint32_t)(atomic_load(&pool.state) >> 32) + 1;
  atomic_store(&pool.state, ((uint64_t)closed << 32) | CLOSED);
  pthread_mutex_lock(&pool.wake_lock);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.wake_lock);
  for (int i = 0; i < pool.workers; ++i)
    pthread_join(pool.threads[i], NULL);
  pool.workers = 0;
  pthread_mutex_unlock(&pool.busy);
}

static void register_stop(void) {
  pool.owner = getpid();
  atexit(stop_workers);
}

void htp__parallel(int64_t n, int64_t grain, htp__chunk_fn fn, void *ctx) {
  if (n <= 0)
    return;
  if (grain < 1)
    grain = 1;
  const int64_t chunks = (n + grain - 1) / grain;
  int threads = htp__threads();
  if (threads > MAX_WORKERS + 1)
    threads = MAX_WORKERS + 1;
  if (chunks < 2 || chunks >= (int64_t)CLOSED || threads < 2 ||
      pthread_mutex_trylock(&pool.busy) != 0) {
    fn(ctx, 0, n);
    return;
  }
  if (atomic_load(&pool.stopping)) { /* exiting: the workers are gone */
    pthread_mutex_unlock(&pool.busy);
    fn(ctx, 0, n);
    return;
  }
  if (pool.workers < threads - 1) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_stop);
  }
  while (pool.workers < threads - 1) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    /* Attention keeps up to ~150 KiB of tiles on a worker's stack. */
    pthread_attr_setstacksize(&attr, (size_t)8 << 20);
    int failed = pthread_create(&pool.threads[pool.workers], &attr, worker_main,
                                (void *)(intptr_t)pool.workers);
    pthread_attr_destroy(&attr);
    if (failed)
      break; /* fewer helpers; the caller still does every unclaimed chunk */
    pool.workers++;
  }
  /* Close the counter first (a read-modify-write, so the job's writes below
   * cannot move above it): from here no worker's claim on the last job can
   * succeed. Each job takes two generations, the closed one and its own. */
  const uint32_t closed = (uint32_t)(atomic_load(&pool.state) >> 32) + 1;
  atomic_exchange(&pool.state, ((uint64_t)closed << 32) | CLOSED);
  pool.fn = fn;
  pool.ctx = ctx;
  pool.n = n;
  pool.grain = grain;
  pool.chunks = chunks;
  atomic_store(&pool.done, 0);
  atomic_store(&pool.allowed, threads - 1);
  const uint32_t generation = closed + 1;
  atomic_store(&pool.state, (uint64_t)generation << 32); /* publishes the job */
  pthread_mutex_lock(&pool.wake_lock);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.wake_lock);

  run_chunks(generation);
  /* Everything is claimed; wait for the chunks workers are still running. */
  while (atomic_load(&pool.done) < chunks)
    sched_yield();
  pthread_mutex_unlock(&pool.busy);
}

struct sgemm_job {
  CBLAS_TRANSPOSE transa, transb;
  int64_t m, n, k;
  float alpha, beta;
  const float *a, *b;
  float *c;
  int64_t lda, ldb, ldc;
};

/* One single-threaded row-major GEMM of the library the build chose. */
static void one_gemm(CBLAS_TRANSPOSE transa, CBLAS_TRANSPOSE transb, int64_t m, int64_t n,
                     int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc) {
#ifdef HTP_BLAS_ONEDNN
  /* oneDNN threads each call with OpenMP, as many threads as the calling
   * thread's OpenMP setting: one, so that the pool (and a rank's share of
   * the cores) stays the one owner of the cores. Per thread, once. */
  static _Thread_local int single;
  if (!single) {
    omp_set_num_threads(1);
    single = 1;
  }
  dnnl_sgemm(transa == CblasNoTrans ? 'N' : 'T', transb == CblasNoTrans ? 'N' : 'T', m, n, k,
             alpha, a, lda, b, ldb, beta, c, ldc);
#else
  cblas_sgemm(CblasRowMajor, transa, transb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
              (int)ldb, beta, c, (int)ldc);
#endif
}

/* Rows [begin, end) of C: A's rows, or A's columns when it is transposed. */
static void sgemm_rows(void *ctx, int64_t begin, int64_t end) {
  const struct sgemm_job *job = ctx;
  const float *a = job->a + (job->transa == CblasNoTrans ? begin * job->lda : begin);
  one_gemm(job->transa, job->transb, end - begin, job->n, job->k, job->alpha, a, job->lda,
           job->b, job->ldb, job->beta, job->c + begin * job->ldc, job->ldc);
}

/* Columns [begin, end) of C: B's columns, or B's rows when it is transposed. */
static void sgemm_cols(void *ctx, int64_t begin, int64_t end) {
  const struct sgemm_job *job = ctx;
  const float *b = job->b + (job->transb == CblasNoTrans ? begin : begin * job->ldb);
  one_gemm(job->transa, job->transb, job->m, end - begin, job->k, job->alpha, job->a, job->lda,
           b, job->ldb, job->beta, job->c + begin, job->ldc);
}

/* oneDNN generates its f32 GEMM kernels in the process's first dnnl_sgemm
 * (once) and does not check that their code memory came: under a tight
 * address-space limit that first product crashed in its JIT (SIGSEGV, 6 of
 * 324 training runs under ulimit -v near the edge). So the first product
 * is made here, when an environment is created (before a rank's buffers),
 * after a probe that memory can still be had: a refusal can then be said.
 * 0, or -1 when memory is short. */
enum { GEMM_READY_PROBE_BYTES = 8 << 20 };
static int gemm_ready_status;
static void make_gemm_ready(void) {
  void *probe = mmap(NULL, GEMM_READY_PROBE_BYTES, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED) {
    gemm_ready_status = -1;
    return;
  }
  munmap(probe, GEMM_READY_PROBE_BYTES);
  /* Large enough for oneDNN's JIT path (a 1x1 product takes another). */
  enum { SIDE = 64 };
  static float a[SIDE * SIDE], b[SIDE * SIDE], c[SIDE * SIDE];
  one_gemm(CblasNoTrans, CblasTrans, SIDE, SIDE, SIDE, 1.0f, a, SIDE, b, SIDE, 0.0f, c, SIDE);
}

int htp__cpu_gemm_ready(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, make_gemm_ready);
  return gemm_ready_status;
}

int htp__isa_cap_allows_avx512(void) {
#ifdef HTP_BLAS_ONEDNN
  /* oneDNN reads ONEDNN_MAX_CPU_ISA once; the answer does not change. */
  static _Atomic int allows = -1;
  int known = atomic_load(&allows);
  if (known < 0) {
    known = htp__onednn_isa_has(dnnl_cpu_isa_avx512_core);
    atomic_store(&allows, known);
  }
  return known;
#else
  return 1;
#endif
}

static char provider[96];

/* The library, its version and, for oneDNN, the ISA its kernels are
 * generated for (capped by ONEDNN_MAX_CPU_ISA). */
static void describe_provider(void) {
#ifdef HTP_BLAS_ONEDNN
  static const struct {
    dnnl_cpu_isa_t isa;
    const char *name;
  } isas[] = {{dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
              {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
              {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
              {dnnl_cpu_isa_avx512_core, "avx512_core"},
              {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
              {dnnl_cpu_isa_avx2, "avx2"},
              {dnnl_cpu_isa_avx, "avx"},
              {dnnl_cpu_isa_sse41, "sse41"}};
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const char *name = "?";
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; ++i)
    if (isa == isas[i].isa) {
      name = isas[i].name;
      break;
    }
  const dnnl_version_t *version = dnnl_version();
  snprintf(provider, sizeof provider, "onednn %d.%d.%d (%s)", version->major, version->minor,
           version->patch, name);
#elif defined(HTP_BLAS_BLIS)
  snprintf(provider, sizeof provider, "blis");
#elif defined(HTP_BLAS_OPENBLAS)
  snprintf(provider, sizeof provider, "openblas (%s)", openblas_get_corename());
#else
  snprintf(provider, sizeof provider, "plain C loop");
#endif
}

const char *htp_cpu_gemm_provider(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, describe_provider);
  return provider;
}

enum {
  /* Multiply-adds below which a product runs in one call. */
  SGEMM_SERIAL_MACS = 2000000,
  /* Multiply-adds a part should have at least (its packing is paid per part). */
  SGEMM_PART_MACS = 1000000,
};

void htp__sgemm(CBLAS_TRANSPOSE transa, CBLAS_TRANSPOSE transb, int64_t m, int64_t n, int64_t k,
                float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                float beta, float *c, int64_t ldc) {
  struct sgemm_job job = {transa, transb, m, n, k, alpha, beta, a, b, c, lda, ldb, ldc};
  const int threads = htp__threads();
  const double macs = (double)m * (double)n * (double)k;
  if (threads < 2 || macs < SGEMM_SERIAL_MACS || m < 1 || n < 1) {
    sgemm_rows(&job, 0, m);
    return;
  }
  /* Two parts per thread (a late worker leaves only half its share to the
   * others), none below SGEMM_PART_MACS, split along C's longer side in
   * multiples of 16 (whole vectors for BLAS's edge kernels). A tall C (the
   * activations' GEMMs) splits by rows; a short wide one by columns; the
   * weight gradients (C as small as a weight, k the batch's rows) by
   * whichever side is longer. Each element's sum over k is one BLAS call's
   * in every case. */
  int64_t parts = 2 * (int64_t)threads;
  if (macs / (double)parts < SGEMM_PART_MACS)
    parts = (int64_t)(macs / SGEMM_PART_MACS) > 1 ? (int64_t)(macs / SGEMM_PART_MACS) : 1;
  const int by_rows = m >= n;
  const int64_t side = by_rows ? m : n;
  int64_t grain = (side + parts - 1) / parts;
  grain = (grain + 15) / 16 * 16;
  htp__parallel(side, grain, by_rows ? sgemm_rows : sgemm_cols, &job);
}

/* Each thread's rooms, freed when it ends (a destructor of a key: the
 * pool's workers are joined at exit, and _Thread_local pointers leaked). */
typedef struct thread_rooms {
  void *room[HTP_ROOMS];
  size_t bytes[HTP_ROOMS];
} thread_rooms;

static pthread_key_t rooms_key;
static int rooms_key_failed;

static void free_rooms(void *data) {
  thread_rooms *rooms = data;
  for (int i = 0; i < HTP_ROOMS; ++i)
    free(rooms->room[i]);
  free(rooms);
}

static void make_rooms_key(void) {
  rooms_key_failed = pthread_key_create(&rooms_key, free_rooms) != 0;
}

void *htp__thread_room(int which, size_t bytes) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, make_rooms_key);
  if (rooms_key_failed || which < 0 || which >= HTP_ROOMS || bytes > SIZE_MAX - 64)
    return NULL;
  thread_rooms *rooms = pthread_getspecific(rooms_key);
  if (!rooms) {
    if (!(rooms = calloc(1, sizeof *rooms)))
      return NULL;
    if (pthread_setspecific(rooms_key, rooms) != 0) {
      free(rooms);
      return NULL;
    }
  }
  if (bytes > rooms->bytes[which]) {
    free(rooms->room[which]);
    rooms->bytes[which] = 0;
    bytes = (bytes + 63) / 64 * 64;
    if (!(rooms->room[which] = aligned_alloc(64, bytes)))
      return NULL;
    rooms->bytes[which] = bytes;
  }
  return rooms->room[which];
}

/* htp_matmul_precision of htp__linear_gemm; process-wide like the thread
 * count (one run's ranks share the choice). */
static _Atomic int matmul_precision;

int htp__matmul_precision(void) { return atomic_load(&matmul_precision); }
void htp__set_matmul_precision(int precision) { atomic_store(&matmul_precision, precision); }

/* x rounded to the nearest value with `kept` mantissa bits (7: bf16, 10:
 * TF32), ties to even; a NaN stays NaN, infinities stay, and a finite
 * value past the format's largest rounds to infinity, as
 * htp_bf16_from_f32. Branch-free, so the copies below vectorise. */
static inline float round_mantissa(float x, int kept) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  const int dropped = 23 - kept;
  const uint32_t half = (UINT32_C(1) << (dropped - 1)) - 1;
  const uint32_t rounded =
      (bits + half + ((bits >> dropped) & 1u)) & ~((UINT32_C(1) << dropped) - 1);
  const uint32_t nan = (bits & 0x7fffffffu) > 0x7f800000u;
  bits = nan ? (bits | 0x00400000u) : rounded;
  memcpy(&x, &bits, sizeof x);
  return x;
}

struct round_job {
  const float *src;
  float *dst;
  int64_t src_ld, cols; /* rows of `cols` floats, src_ld apart, packed into dst */
  int kept;
};

HTP_VECTOR_CLONES static void round_rows(void *ctx, int64_t begin, int64_t end) {
  const struct round_job *job = ctx;
  const int kept = job->kept;
  for (int64_t r = begin; r < end; ++r) {
    const float *src = job->src + r * job->src_ld;
    float *dst = job->dst + r * job->cols;
    if (kept == 7)
      for (int64_t i = 0; i < job->cols; ++i) dst[i] = round_mantissa(src[i], 7);
    else
      for (int64_t i = 0; i < job->cols; ++i) dst[i] = round_mantissa(src[i], 10);
  }
}

/* A stored matrix of `rows` rows of `cols` floats, ld apart, rounded into
 * dst packed (ld = cols). */
static void round_matrix(const float *src, int64_t ld, int64_t rows, int64_t cols, float *dst,
                         int kept) {
  struct round_job job = {src, dst, ld, cols, kept};
  htp__parallel(rows, 1 + HTP_GRAIN / (cols > 0 ? cols : 1), round_rows, &job);
}

void htp__linear_gemm(CBLAS_TRANSPOSE transa, CBLAS_TRANSPOSE transb, int64_t m, int64_t n,
                      int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float beta, float *c, int64_t ldc) {
  const int precision = htp__matmul_precision();
  if (precision == HTP_MATMUL_F32 || m < 1 || n < 1 || k < 1) {
    htp__sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#ifdef HTP_BLAS_ONEDNN
  if (precision == HTP_MATMUL_BF16 && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) &&
      htp__onednn_gemm_bf16(transa != CblasNoTrans, transb != CblasNoTrans, m, n, k, a, lda, b,
                            ldb, beta == 1.0f, c, ldc) == 0)
    return;
#endif
  /* A and B as stored (op(A) [m, k] is A [k, m] when transposed), rounded. */
  const int64_t a_rows = transa == CblasNoTrans ? m : k, a_cols = transa == CblasNoTrans ? k : m;
  const int64_t b_rows = transb == CblasNoTrans ? k : n, b_cols = transb == CblasNoTrans ? n : k;
  const int kept = precision == HTP_MATMUL_BF16 ? 7 : 10;
  float *room = htp__thread_room(HTP_ROOM_OPERANDS, (size_t)(m * k + k * n) * sizeof(float));
  if (!room) { /* out of memory for the copies: the f32 product, said once */
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
      fprintf(stderr, "htp kernels: no memory for a reduced-precision product's operands; "
                      "computing it in f32\n");
    htp__sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  float *ra = room, *rb = room + m * k;
  round_matrix(a, lda, a_rows, a_cols, ra, kept);
  round_matrix(b, ldb, b_rows, b_cols, rb, kept);
  htp__sgemm(transa, transb, m, n, k, alpha, ra, a_cols, rb, b_cols, beta, c, ldc);
}
