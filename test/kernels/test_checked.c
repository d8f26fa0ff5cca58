/*===- test/kernels/test_checked.c - The checked device --------------------===*
 *
 * The checked device (kernels/checked/) behaves like a GPU towards the code
 * that drives it, so each class of device bug fails here, on the CPU:
 *  1. its memory: results equal the CPU table's bitwise; a host pointer, a
 *     freed one, an overrun by one element, device memory where an entry
 *     takes a host array, each refused with the argument's name; new memory
 *     reads as NaN; a host store through a device address faults (in a
 *     child process); its size is HTP_CHECKED_MEMORY_MB;
 *  2. the CUDA kernels' scratch contract: CPU-sized attention scratch is
 *     refused, and a compiled block's formula (htp_attention_scratch_floats)
 *     covers both devices; the memory of their own the CUDA kernels would
 *     take is booked per request, at its high water (own_memory);
 *  3. the stream: entries return before the stream is done, to_host and
 *     elapsed wait for it, marks see the device's time; two users of one
 *     timer fail while separate timers nest;
 *  4. the runtime on it: the public collectives take device memory and
 *     refuse host buffers, the host world's control traffic refuses device
 *     memory, and a collective's communication time leaves out the rank's
 *     own queued kernels.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/htp_kernel_table.h"
#include "kernels/htp_scratch.h"
#include "runtime/comm_internal.h"
#include "runtime/htp.h"
#include "runtime/htp_ops.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct device {
  const htp_kernel_table *table;
  htp_kernel_env env;
  char error[256];
} device;

static void open_device(device *d, const char *latency_us) {
  setenv("HTP_CHECKED_LATENCY_US", latency_us, 1);
  d->table = htp_checked_kernel_table();
  assert_int_equal(htp_checked_kernel_env_create(&d->env, d->error, sizeof d->error),
                   HTP_KERNEL_OK);
  unsetenv("HTP_CHECKED_LATENCY_US");
}

static void close_device(device *d) { htp_checked_kernel_env_destroy(&d->env); }

/* n floats uploaded to fresh device memory. */
static float *upload(device *d, const float *host, int64_t n) {
  void *p = NULL;
  assert_int_equal(d->table->alloc(&d->env, (size_t)n * sizeof(float), &p), HTP_KERNEL_OK);
  assert_true(htp_checked_is_device(p));
  assert_int_equal(d->table->to_device(&d->env, p, host, (size_t)n * sizeof(float)),
                   HTP_KERNEL_OK);
  return p;
}

static float *random_host(int64_t n, unsigned seed) {
  float *p = malloc((size_t)n * sizeof(float));
  assert_non_null(p);
  srand(seed);
  for (int64_t i = 0; i < n; ++i) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  return p;
}

enum { ROWS = 6, IN = 5, OUT = 7 };

/* 1. Memory: checked results are the CPU table's; each misuse is named. */
static void memory_is_checked(void **state) {
  (void)state;
  device d;
  open_device(&d, "0");
  const htp_kernel_table *cpu = htp_cpu_kernel_table();
  float *x = random_host(ROWS * IN, 1), *w = random_host(OUT * IN, 2), *b = random_host(OUT, 3);
  float want[ROWS * OUT], got[ROWS * OUT];
  assert_int_equal(cpu->linear_f32(NULL, x, w, b, want, ROWS, IN, OUT), HTP_KERNEL_OK);
  float *dx = upload(&d, x, ROWS * IN), *dw = upload(&d, w, OUT * IN), *db = upload(&d, b, OUT);
  void *dy = NULL;
  assert_int_equal(d.table->alloc(&d.env, sizeof got, &dy), HTP_KERNEL_OK);
  /* Fresh device memory is poisoned: NaN until written. */
  assert_int_equal(d.table->to_host(&d.env, got, dy, sizeof got), HTP_KERNEL_OK);
  assert_true(isnan(got[0]) && isnan(got[ROWS * OUT - 1]));
  assert_int_equal(d.table->linear_f32(&d.env, dx, dw, db, dy, ROWS, IN, OUT), HTP_KERNEL_OK);
  assert_int_equal(d.table->to_host(&d.env, got, dy, sizeof got), HTP_KERNEL_OK);
  assert_memory_equal(got, want, sizeof got);

  /* A host tensor where device memory is due. */
  assert_int_equal(d.table->linear_f32(&d.env, x, dw, db, dy, ROWS, IN, OUT),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "x ("));
  assert_non_null(strstr(d.error, "is host memory"));
  /* One row too many: the output overruns its allocation. */
  assert_int_equal(d.table->linear_f32(&d.env, dx, dw, db, dy, ROWS + 1, IN, OUT),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "past its end"));
  /* Inside an allocation but running past it (an offset view). */
  assert_int_equal(d.table->add_f32(&d.env, dw + 1, dw, dw, OUT * IN), HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "add_f32: a needs"));
  /* A host array given device memory (unit lists live on the host). */
  assert_int_equal(d.table->linear_units_f32(&d.env, dx, dw, dy, ROWS, IN, OUT, 1,
                                             (const int32_t *)db, 1, 0),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "host array"));
  /* The same-device sum: a host array of device pointers. */
  const float *parts[2] = {dy, dy};
  assert_int_equal(d.table->sum_f32(&d.env, parts, 2, dy, ROWS * OUT), HTP_KERNEL_OK);
  assert_int_equal(d.table->to_host(&d.env, got, dy, sizeof got), HTP_KERNEL_OK);
  assert_true(got[3] == 2 * want[3]);
  const float *host_part[2] = {dy, want};
  assert_int_equal(d.table->sum_f32(&d.env, host_part, 2, dy, ROWS * OUT),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "x[1]"));
  /* Copies: device to device only; host ends only through to_host/to_device. */
  assert_int_equal(d.table->copy(&d.env, dy, want, sizeof want), HTP_KERNEL_ERR_INVALID);
  assert_int_equal(d.table->to_host(&d.env, dx, dy, 4), HTP_KERNEL_ERR_INVALID);
  /* Freed memory and double frees. */
  assert_int_equal(d.table->release(&d.env, db), HTP_KERNEL_OK);
  assert_int_equal(d.table->bias_add_f32(&d.env, dy, db, dy, ROWS, OUT), HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "no live allocation"));
  assert_int_equal(d.table->release(&d.env, db), HTP_KERNEL_ERR_INVALID);
  assert_int_equal(d.table->release(&d.env, dw + 1), HTP_KERNEL_ERR_INVALID);
  size_t live = htp_checked_live_bytes();
  assert_int_equal(d.table->release(&d.env, dx), HTP_KERNEL_OK);
  assert_int_equal(d.table->release(&d.env, dw), HTP_KERNEL_OK);
  assert_int_equal(d.table->release(&d.env, dy), HTP_KERNEL_OK);
  assert_int_equal(htp_checked_live_bytes(), live - sizeof got - sizeof(float) * (ROWS + OUT) * IN);
  /* The device's size: HTP_CHECKED_MEMORY_MB, as cudaMalloc's limit. */
  setenv("HTP_CHECKED_MEMORY_MB", "1", 1);
  size_t free_bytes = 0, total_bytes = 0;
  assert_int_equal(d.table->memory(&d.env, &free_bytes, &total_bytes), HTP_KERNEL_OK);
  assert_true(total_bytes == (1u << 20) && free_bytes == total_bytes - htp_checked_live_bytes());
  void *big = NULL;
  assert_int_equal(d.table->alloc(&d.env, (1u << 20) + 1, &big), HTP_KERNEL_ERR_NOMEM);
  assert_non_null(strstr(d.error, "out of device memory"));
  assert_null(big);
  unsetenv("HTP_CHECKED_MEMORY_MB");
  free(x), free(w), free(b);
  close_device(&d);
}

/* A host store through a device address faults, as on a GPU it would be
 * garbage: the child dies of a signal, not a silent write. */
/* copy_2d (the balancer's unit gathers): the rows land where the pitches
 * say, equal to the CPU table's; a last row past either allocation, a pitch
 * below the row and host memory are refused, naming what is wrong. */
static void copy_2d_is_checked(void **state) {
  (void)state;
  device d;
  open_device(&d, "0");
  enum { LINES = 5, SRC = 7, DST = 4, ROW = 3 };
  float *host = random_host(LINES * SRC, 9), got[LINES * DST], want[LINES * DST];
  float *src = upload(&d, host, LINES * SRC);
  memset(want, 0, sizeof want);
  float *dst = upload(&d, want, LINES * DST);
  const size_t f = sizeof(float);
  /* Columns 2..4 of each source row into columns 1..3 of each destination row. */
  assert_int_equal(d.table->copy_2d(&d.env, dst + 1, DST * f, src + 2, SRC * f, ROW * f, LINES),
                   HTP_KERNEL_OK);
  assert_int_equal(htp_cpu_kernel_table()->copy_2d(NULL, want + 1, DST * f, host + 2, SRC * f,
                                                   ROW * f, LINES),
                   HTP_KERNEL_OK);
  assert_int_equal(d.table->to_host(&d.env, got, dst, sizeof got), HTP_KERNEL_OK);
  assert_memory_equal(got, want, sizeof got);
  for (int r = 0; r < LINES; ++r) assert_true(want[r * DST + 1] == host[r * SRC + 2]);
  /* One row too many: the last one ends past the destination. */
  assert_int_equal(d.table->copy_2d(&d.env, dst + 1, DST * f, src, SRC * f, ROW * f, LINES + 1),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "past its end"));
  assert_int_equal(d.table->copy_2d(&d.env, dst, DST * f, src, 2 * f, ROW * f, 2),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "pitch"));
  assert_int_equal(d.table->copy_2d(&d.env, dst, DST * f, host, SRC * f, ROW * f, 2),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "is host memory"));
  assert_int_equal(d.table->release(&d.env, src), HTP_KERNEL_OK);
  assert_int_equal(d.table->release(&d.env, dst), HTP_KERNEL_OK);
  free(host);
  close_device(&d);
}

static void host_access_faults(void **state) {
  (void)state;
  device d;
  open_device(&d, "0");
  void *p = NULL;
  assert_int_equal(d.table->alloc(&d.env, 64, &p), HTP_KERNEL_OK);
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    signal(SIGSEGV, SIG_DFL); /* not cmocka's handler, which would go on testing */
    signal(SIGBUS, SIG_DFL);
    volatile float *f = p;
    f[0] = 1.0f;
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  /* Killed by the fault (under ASan: reported, then exit 1). */
  assert_true(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0));
  assert_int_equal(d.table->release(&d.env, p), HTP_KERNEL_OK);
  close_device(&d);
}

/* 2. The attention's scratch is the CUDA kernel's, and a compiled block's
 * formula covers it. */
static void attention_scratch_is_cudas(void **state) {
  (void)state;
  enum { B = 2, T = 5, D = 8, H = 2, HD = 4 };
  const int64_t cpu = htp_cpu_attention_scratch_floats(B, T, D, H, HD);
  const int64_t cuda = htp_cuda_attention_scratch_floats(B, T, D, H, HD);
  assert_true(cuda > cpu);
  assert_int_equal(htp_attention_scratch_floats(B, T, D, H, HD), cuda);
  device d;
  open_device(&d, "0");
  float *x = random_host(B * T * D, 4), *wqkv = random_host(3 * H * HD * D, 5);
  float *wproj = random_host(D * H * HD, 6);
  float *dx = upload(&d, x, B * T * D), *dwqkv = upload(&d, wqkv, 3 * H * HD * D);
  float *dwproj = upload(&d, wproj, D * H * HD);
  void *y = NULL, *scratch = NULL;
  assert_int_equal(d.table->alloc(&d.env, sizeof(float) * B * T * D, &y), HTP_KERNEL_OK);
  assert_int_equal(d.table->alloc(&d.env, sizeof(float) * (size_t)cuda, &scratch), HTP_KERNEL_OK);
  assert_int_equal(d.table->attention_f32(&d.env, dx, dwqkv, NULL, dwproj, NULL, y, scratch, cpu,
                                          B, T, D, H, HD),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "the CUDA kernel needs"));
  assert_int_equal(d.table->attention_f32(&d.env, dx, dwqkv, NULL, dwproj, NULL, y, scratch, cuda,
                                          B, T, D, H, HD),
                   HTP_KERNEL_OK);
  /* Claiming more scratch than was allocated is an overrun. */
  assert_int_equal(d.table->attention_f32(&d.env, dx, dwqkv, NULL, dwproj, NULL, y, scratch,
                                          cuda + 1, B, T, D, H, HD),
                   HTP_KERNEL_ERR_INVALID);
  void *all[] = {dx, dwqkv, dwproj, y, scratch};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
    assert_int_equal(d.table->release(&d.env, all[i]), HTP_KERNEL_OK);
  free(x), free(wqkv), free(wproj);
  close_device(&d);
}

/* n bytes of fresh device memory. */
static void *device_bytes(device *d, size_t n) {
  void *p = NULL;
  assert_int_equal(d->table->alloc(&d->env, n, &p), HTP_KERNEL_OK);
  return p;
}

static uint64_t own_memory(device *d) {
  uint64_t bytes = UINT64_MAX;
  assert_int_equal(d->table->own_memory(&d->env, &bytes), HTP_KERNEL_OK);
  return bytes;
}

/* 2b. What the CUDA kernels would keep of their own: each request by its
 * formula, each buffer at its largest request, the buffers summed. */
static void own_memory_is_cudas(void **state) {
  (void)state;
  enum { B = 2, T = 5, D = 8, H = 2, HD = 4, R = B * T, HID = 12 };
  device d;
  open_device(&d, "0");
  assert_null(htp_cpu_kernel_table()->own_memory);
  assert_int_equal(own_memory(&d), 0);
  /* Sized for f32; the bf16 calls use their first half. Zeros: finite in both. */
  const size_t x_bytes = 4 * R * D, w_bytes = 4 * 3 * H * HD * D, b_bytes = 4 * 3 * H * HD;
  void *x = device_bytes(&d, x_bytes), *w = device_bytes(&d, w_bytes);
  void *b = device_bytes(&d, b_bytes), *y = device_bytes(&d, 4 * R * HID);
  assert_int_equal(d.table->zero(&d.env, x, x_bytes), HTP_KERNEL_OK);
  assert_int_equal(d.table->zero(&d.env, w, w_bytes), HTP_KERNEL_OK);
  assert_int_equal(d.table->zero(&d.env, b, b_bytes), HTP_KERNEL_OK);
  /* Linears without a bias write their outputs directly. */
  assert_int_equal(d.table->linear_f32(&d.env, x, w, NULL, y, R, D, HID), HTP_KERNEL_OK);
  assert_int_equal(d.table->linear_bf16(&d.env, x, w, NULL, y, R, D, HID), HTP_KERNEL_OK);
  assert_int_equal(own_memory(&d), 0);
  /* With a bias, either type may take cuBLASLt's epilogue and its workspace. */
  assert_int_equal(d.table->linear_f32(&d.env, x, w, b, y, R, D, HID), HTP_KERNEL_OK);
  const int64_t lt = HTP_CUDA_LT_WORKSPACE_BYTES;
  assert_int_equal(own_memory(&d), lt);
  /* A bf16 linear with a bias rounds an f32 sum: [R, HID] floats. */
  assert_int_equal(d.table->linear_bf16(&d.env, x, w, b, y, R, D, HID), HTP_KERNEL_OK);
  const int64_t sums = htp_cuda_sums_bytes(R, HID);
  assert_int_equal(own_memory(&d), lt + sums);
  /* A smaller request reuses it. */
  assert_int_equal(d.table->linear_bf16(&d.env, x, w, b, y, R, D, HID / 2), HTP_KERNEL_OK);
  assert_int_equal(own_memory(&d), lt + sums);
  /* The same-device sum stages its pointers, in a buffer of their own. */
  const float *parts[2] = {y, y};
  assert_int_equal(d.table->sum_f32(&d.env, parts, 2, y, R), HTP_KERNEL_OK);
  const int64_t staging = htp_cuda_staging_bytes(2 * (int64_t)sizeof(float *), 0);
  assert_int_equal(own_memory(&d), lt + sums + staging);
  /* The listed heads run as one attention of that many heads in the
   * kernels' own scratch, their weights gathered there: one head's, then
   * every head's (the buffer grows to it). */
  void *context = device_bytes(&d, 4 * R * H * HD);
  void *scratch = device_bytes(&d, 4 * (size_t)(R * 3 * HD + T * T));
  const int32_t one[] = {1}, every[] = {0, 1};
  assert_int_equal(d.table->attention_heads_f32(&d.env, x, w, b, context, scratch, B, T, D, H, HD,
                                                one, 1),
                   HTP_KERNEL_OK);
  const int64_t head = htp_cuda_heads_bytes(B, T, D, 1, HD, 4);
  assert_true(head >= 4 * htp_cuda_attention_scratch_floats(B, T, D, 1, HD) +
                          4 * 3 * HD * (D + 1));
  assert_int_equal(own_memory(&d), lt + sums + staging + head);
  assert_int_equal(d.table->attention_heads_f32(&d.env, x, w, b, context, scratch, B, T, D, H, HD,
                                                every, 2),
                   HTP_KERNEL_OK);
  const int64_t heads = htp_cuda_heads_bytes(B, T, D, H, HD, 4);
  assert_true(heads > head);
  assert_int_equal(own_memory(&d), lt + sums + staging + heads);
  /* In bf16 its qkv projection rounds an f32 sum of [R, 3 * H * HD], larger
   * than the linear's: the sums buffer grows to it. */
  assert_int_equal(d.table->attention_heads_bf16(&d.env, x, w, b, context, scratch, B, T, D, H,
                                                 HD, every, 2),
                   HTP_KERNEL_OK);
  assert_true(htp_cuda_sums_bytes(R, 3 * H * HD) > sums);
  assert_int_equal(own_memory(&d), lt + htp_cuda_sums_bytes(R, 3 * H * HD) + staging + heads);
  void *all[] = {x, w, b, y, context, scratch};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
    assert_int_equal(d.table->release(&d.env, all[i]), HTP_KERNEL_OK);
  close_device(&d);
}

/* 3. The stream: 20 ms of latency per entry. */
static void stream_and_timers(void **state) {
  (void)state;
  device d;
  open_device(&d, "20000");
  float host[16] = {0};
  float *p = upload(&d, host, 16);
  assert_int_equal(d.table->mark(&d.env, HTP_KERNEL_TIMER_CALLER, 0), HTP_KERNEL_OK);
  double started = now();
  assert_int_equal(d.table->add_f32(&d.env, p, p, p, 16), HTP_KERNEL_OK);
  assert_int_equal(d.table->add_f32(&d.env, p, p, p, 16), HTP_KERNEL_OK);
  const double enqueued = now() - started;
  /* A nested timer of its own: the hooks' inside the caller's span. */
  assert_int_equal(d.table->mark(&d.env, HTP_KERNEL_TIMER_HOOKS, 0), HTP_KERNEL_OK);
  assert_int_equal(d.table->add_f32(&d.env, p, p, p, 16), HTP_KERNEL_OK);
  assert_int_equal(d.table->mark(&d.env, HTP_KERNEL_TIMER_HOOKS, 1), HTP_KERNEL_OK);
  double hook = 0, whole = 0;
  assert_int_equal(d.table->elapsed(&d.env, HTP_KERNEL_TIMER_HOOKS, &hook), HTP_KERNEL_OK);
  assert_int_equal(d.table->mark(&d.env, HTP_KERNEL_TIMER_CALLER, 1), HTP_KERNEL_OK);
  assert_int_equal(d.table->elapsed(&d.env, HTP_KERNEL_TIMER_CALLER, &whole), HTP_KERNEL_OK);
  /* The host got control back long before the device was done. */
  assert_true(enqueued < 0.02);
  assert_true(hook >= 0.019 && hook < 0.1);
  assert_true(whole >= 0.059 && whole < 0.3);
  /* Two users of one timer: the second mark 0 before the first's elapsed. */
  assert_int_equal(d.table->mark(&d.env, HTP_KERNEL_TIMER_CALLER, 0), HTP_KERNEL_OK);
  assert_int_equal(d.table->mark(&d.env, HTP_KERNEL_TIMER_CALLER, 0), HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(d.error, "two timers share"));
  assert_int_equal(d.table->mark(&d.env, HTP_KERNEL_TIMER_HOOKS, 1), HTP_KERNEL_ERR_INVALID);
  assert_int_equal(d.table->mark(&d.env, HTP_KERNEL_TIMERS, 0), HTP_KERNEL_ERR_INVALID);
  /* to_host waits for the queue: the result is the finished one. */
  assert_int_equal(d.table->add_f32(&d.env, p, p, p, 16), HTP_KERNEL_OK);
  started = now();
  assert_int_equal(d.table->to_host(&d.env, host, p, sizeof host), HTP_KERNEL_OK);
  assert_true(now() - started >= 0.015);
  assert_int_equal(d.table->release(&d.env, p), HTP_KERNEL_OK);
  close_device(&d);
  /* A bad latency is refused, with the variable's name. */
  setenv("HTP_CHECKED_LATENCY_US", "-3", 1);
  htp_kernel_env bad;
  char error[256];
  assert_int_equal(htp_checked_kernel_env_create(&bad, error, sizeof error),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "HTP_CHECKED_LATENCY_US"));
  unsetenv("HTP_CHECKED_LATENCY_US");
}

/* 3c. Copies between device buffers wait in the stream's queue, as on a
 * GPU: another stream (a peer rank's) reads the old bytes until the
 * copying stream is waited for; the stream's next other entry runs them
 * first (in order); release (cudaFree) and the environment's destroy wait
 * for them. Each copy done at its call would pass every other test. */
static void queued_copies(void **state) {
  (void)state;
  device d, peer;
  open_device(&d, "0");
  open_device(&peer, "0");
  enum { N = 8 };
  const size_t f = sizeof(float);
  float old[N], fresh[N], got[N], want[N];
  for (int i = 0; i < N; ++i) old[i] = (float)-i, fresh[i] = (float)(i + 1);
  float *src = upload(&d, fresh, N), *dst = upload(&d, old, N);
  assert_int_equal(d.table->copy(&d.env, dst, src, sizeof fresh), HTP_KERNEL_OK);
  assert_int_equal(peer.table->to_host(&peer.env, got, dst, sizeof got), HTP_KERNEL_OK);
  assert_memory_equal(got, old, sizeof got); /* d's stream not waited for */
  assert_int_equal(d.table->synchronize(&d.env), HTP_KERNEL_OK);
  assert_int_equal(peer.table->to_host(&peer.env, got, dst, sizeof got), HTP_KERNEL_OK);
  assert_memory_equal(got, fresh, sizeof got);
  /* copy_2d: two rows of 2 of every 4 floats. */
  assert_int_equal(d.table->to_device(&d.env, dst, old, sizeof old), HTP_KERNEL_OK);
  assert_int_equal(d.table->copy_2d(&d.env, dst, 4 * f, src, 4 * f, 2 * f, 2), HTP_KERNEL_OK);
  assert_int_equal(peer.table->to_host(&peer.env, got, dst, sizeof got), HTP_KERNEL_OK);
  assert_memory_equal(got, old, sizeof got);
  assert_int_equal(d.table->synchronize(&d.env), HTP_KERNEL_OK);
  assert_int_equal(peer.table->to_host(&peer.env, got, dst, sizeof got), HTP_KERNEL_OK);
  for (int i = 0; i < N; ++i) want[i] = i % 4 < 2 ? fresh[i] : old[i];
  assert_memory_equal(got, want, sizeof got);
  /* The stream's next entry runs after its queued copy: the add reads it. */
  assert_int_equal(d.table->to_device(&d.env, dst, old, sizeof old), HTP_KERNEL_OK);
  assert_int_equal(d.table->copy(&d.env, dst, src, sizeof fresh), HTP_KERNEL_OK);
  assert_int_equal(d.table->add_f32(&d.env, dst, dst, dst, N), HTP_KERNEL_OK);
  assert_int_equal(peer.table->to_host(&peer.env, got, dst, sizeof got), HTP_KERNEL_OK);
  for (int i = 0; i < N; ++i) want[i] = 2 * fresh[i];
  assert_memory_equal(got, want, sizeof got);
  /* Freeing the source waits for the copy that reads it (the copy read
   * freed memory after the release). */
  assert_int_equal(d.table->to_device(&d.env, dst, old, sizeof old), HTP_KERNEL_OK);
  assert_int_equal(d.table->copy(&d.env, dst, src, sizeof fresh), HTP_KERNEL_OK);
  assert_int_equal(d.table->release(&d.env, src), HTP_KERNEL_OK);
  assert_int_equal(peer.table->to_host(&peer.env, got, dst, sizeof got), HTP_KERNEL_OK);
  assert_memory_equal(got, fresh, sizeof got);
  /* A peer freeing the buffer this stream's queued copy reads waits for it
   * (cudaFree waits for the whole device; a release ran its own stream's
   * queue only, and the copy read the freed, poisoned bytes). */
  float *theirs = upload(&peer, fresh, N);
  assert_int_equal(d.table->to_device(&d.env, dst, old, sizeof old), HTP_KERNEL_OK);
  assert_int_equal(d.table->copy(&d.env, dst, theirs, sizeof fresh), HTP_KERNEL_OK);
  assert_int_equal(peer.table->release(&peer.env, theirs), HTP_KERNEL_OK);
  assert_int_equal(d.table->to_host(&d.env, got, dst, sizeof got), HTP_KERNEL_OK);
  assert_memory_equal(got, fresh, sizeof got);
  /* Destroying the environment runs what it queued (not lost). */
  src = upload(&d, old, N);
  assert_int_equal(d.table->copy(&d.env, dst, src, sizeof old), HTP_KERNEL_OK);
  close_device(&d);
  assert_int_equal(peer.table->to_host(&peer.env, got, dst, sizeof got), HTP_KERNEL_OK);
  assert_memory_equal(got, old, sizeof got);
  assert_int_equal(peer.table->release(&peer.env, src), HTP_KERNEL_OK);
  assert_int_equal(peer.table->release(&peer.env, dst), HTP_KERNEL_OK);
  close_device(&peer);
}

/* 3b. SM partitions, counted as an H200's: 120 SMs in groups of 8, taken
 * by the environments that hold them and given back when they go; a count
 * that is no partition, or past what is free, is refused with the CUDA
 * device's words. */
static void sm_partitions(void **state) {
  (void)state;
  htp_kernel_env envs[16];
  char error[512];
  assert_int_equal(htp_checked_kernel_env_create_on(12, &envs[0], error, sizeof error),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "12 SMs is not a partition of the checked device"));
  assert_non_null(strstr(error, "nearest: 8 or 16"));
  assert_int_equal(htp_checked_kernel_env_create_on(-8, &envs[0], error, sizeof error),
                   HTP_KERNEL_ERR_INVALID);
  for (int i = 0; i < 15; i++)
    assert_int_equal(htp_checked_kernel_env_create_on(8, &envs[i], error, sizeof error),
                     HTP_KERNEL_OK);
  assert_int_equal(htp_checked_kernel_env_create_on(8, &envs[15], error, sizeof error),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "only 0 of its 120 partitionable SMs are free"));
  /* The whole device (0) is no partition: it still opens. */
  assert_int_equal(htp_checked_kernel_env_create_on(0, &envs[15], error, sizeof error),
                   HTP_KERNEL_OK);
  htp_checked_kernel_env_destroy(&envs[15]);
  for (int i = 0; i < 3; i++) htp_checked_kernel_env_destroy(&envs[i]);
  assert_int_equal(htp_checked_kernel_env_create_on(24, &envs[0], error, sizeof error),
                   HTP_KERNEL_OK);
  assert_int_equal(htp_checked_kernel_env_create_on(8, &envs[1], error, sizeof error),
                   HTP_KERNEL_ERR_INVALID);
  htp_checked_kernel_env_destroy(&envs[0]);
  for (int i = 3; i < 15; i++) htp_checked_kernel_env_destroy(&envs[i]);
  assert_int_equal(htp_checked_kernel_env_create_on(120, &envs[0], error, sizeof error),
                   HTP_KERNEL_OK);
  htp_checked_kernel_env_destroy(&envs[0]);
}

/* 4. The runtime on the checked device: a world of two ranks. */
typedef struct rank_job {
  htp_world *world;
  int rank;
  int failures;
  double comm;
} rank_job;

#define RANK_CHECK(job, condition)                                                             \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      fprintf(stderr, "rank %d: %s:%d: %s\n", (job)->rank, __FILE__, __LINE__, #condition);    \
      (job)->failures++;                                                                       \
    }                                                                                          \
  } while (0)

static void *run_rank(void *argument) {
  rank_job *job = argument;
  htp_ctx *ctx = NULL;
  if (htp_ctx_create(job->world, job->rank, &ctx) != HTP_OK) {
    job->failures++;
    return NULL;
  }
  float host[8], back[16];
  for (int i = 0; i < 8; ++i) host[i] = (float)(job->rank + 1);
  void *send = NULL, *recv = NULL;
  RANK_CHECK(job, htp_mem_alloc(ctx, sizeof host, &send) == HTP_OK);
  RANK_CHECK(job, htp_mem_alloc(ctx, sizeof back, &recv) == HTP_OK);
  RANK_CHECK(job, htp_mem_upload(ctx, send, host, sizeof host) == HTP_OK);
  /* Device buffers: peer copies on the shared device. */
  RANK_CHECK(job, htp_allgather(ctx, send, recv, sizeof host) == HTP_OK);
  RANK_CHECK(job, htp_mem_download(ctx, back, recv, sizeof back) == HTP_OK);
  RANK_CHECK(job, back[0] == 1.0f && back[15] == 2.0f);
  RANK_CHECK(job, htp_allreduce_sum_f32(ctx, send, send, 8) == HTP_OK);
  RANK_CHECK(job, htp_mem_download(ctx, back, send, sizeof host) == HTP_OK);
  RANK_CHECK(job, back[7] == 3.0f);
  /* Control traffic: host memory over the host world. */
  double mine = job->rank, all[2] = {-1, -1};
  RANK_CHECK(job, htp_allgather_host(ctx, &mine, all, sizeof mine) == HTP_OK);
  RANK_CHECK(job, all[0] == 0.0 && all[1] == 1.0);
  /* Point to point on the device. */
  if (job->rank == 0) RANK_CHECK(job, htp_send(ctx, send, sizeof host, 1, 7) == HTP_OK);
  else RANK_CHECK(job, htp_recv(ctx, recv, sizeof host, 0, 7) == HTP_OK);
  /* The rank's own queued kernels (50 ms of stream) are not communication:
   * the collective waits for them before its clock starts. */
  const htp_kernel_table *table = htp_checked_kernel_table();
  for (int i = 0; i < 5; ++i)
    RANK_CHECK(job, table->add_f32(htp__kernel_env(ctx), send, send, send, 8) == HTP_KERNEL_OK);
  const double before = htp_ctx_comm_seconds(ctx);
  RANK_CHECK(job, htp_allreduce_sum_f32(ctx, send, send, 8) == HTP_OK);
  job->comm = htp_ctx_comm_seconds(ctx) - before;
  /* Last: a host buffer handed to a device collective fails the world,
   * and the peer learns it. */
  if (job->rank == 1) {
    RANK_CHECK(job, htp_allgather(ctx, &mine, all, sizeof mine) == HTP_ERR_INVALID);
    RANK_CHECK(job, strstr(htp_last_error(ctx), "is host memory") != NULL);
  } else {
    RANK_CHECK(job, htp_barrier(ctx) != HTP_OK);
  }
  htp_mem_free(ctx, send);
  htp_mem_free(ctx, recv);
  htp_ctx_destroy(ctx);
  return NULL;
}

static void runtime_on_checked_device(void **state) {
  (void)state;
  setenv("HTP_CHECKED_LATENCY_US", "10000", 1);
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.world_size = 2;
  config.timeout_s = 10;
  config.device = HTP_DEVICE_CHECKED;
  htp_world *world = NULL;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  rank_job jobs[2] = {{world, 0, 0, 0}, {world, 1, 0, 0}};
  pthread_t threads[2];
  for (int r = 0; r < 2; ++r) assert_int_equal(pthread_create(&threads[r], NULL, run_rank, &jobs[r]), 0);
  for (int r = 0; r < 2; ++r) pthread_join(threads[r], NULL);
  htp_world_destroy(world);
  unsetenv("HTP_CHECKED_LATENCY_US");
  assert_int_equal(jobs[0].failures + jobs[1].failures, 0);
  /* The host world refuses device memory. */
  config.world_size = 1;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  /* The world notes the device's SMs (an H200's) from its first context:
   * the all-reduce gives a rank on the whole GPU its share of what the
   * partitions leave (unknown, 0: equal chunks). */
  assert_int_equal(htp_checked_device_sm_count(), 132);
  assert_int_equal(atomic_load(&htp_ctx_world(ctx)->device_sms), 132);
  void *device_memory = NULL;
  double host = 0;
  assert_int_equal(htp_mem_alloc(ctx, 8, &device_memory), HTP_OK);
  assert_int_equal(htp_allgather_host(ctx, device_memory, &host, 8), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "is device memory"));
  htp_mem_free(ctx, device_memory);
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
  /* Both ranks queued the same 50 ms: their all-reduce waits for no peer,
   * so its time is the reduction's own (a sum and a copy, 20 ms of stream). */
  for (int r = 0; r < 2; ++r) assert_true(jobs[r].comm < 0.045);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(memory_is_checked),
      cmocka_unit_test(copy_2d_is_checked),
      cmocka_unit_test(host_access_faults),
      cmocka_unit_test(attention_scratch_is_cudas),
      cmocka_unit_test(own_memory_is_cudas),
      cmocka_unit_test(stream_and_timers),
      cmocka_unit_test(queued_copies),
      cmocka_unit_test(sm_partitions),
      cmocka_unit_test(runtime_on_checked_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
