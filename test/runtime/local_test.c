/*===- test/runtime/local_test.c - the local backend and the runtime core --===*
 *
 * Ranks are threads. Collectives are checked against closed forms (rank r
 * contributes r + 1), the all-reduce against a serial rank-order sum bit for
 * bit, transfers with memcmp; then every error case, and fault injection:
 * a hung rank becomes HTP_ERR_TIMEOUT on its peers within the deadline, a
 * dead one HTP_ERR_REMOTE, and every thread ends (joinable under ASan).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "kernels/htp_bf16.h"
#include "runtime/comm_internal.h"
#include "runtime/htp.h"
#include "runtime/htp_ops.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ===== Harness: one thread per rank ===================================== */

enum { MAX_RANKS = 8 };

typedef struct rank_run rank_run;
typedef htp_result (*rank_body)(htp_ctx *ctx, void *user);

struct rank_run {
  htp_world *world;
  int rank;
  rank_body body;
  void *user;
  htp_result result;
  char message[256];
  double seconds; /* how long the body took */
};

static void *rank_thread(void *argument) {
  rank_run *run = argument;
  htp_ctx *ctx = NULL;
  run->result = htp_ctx_create(run->world, run->rank, &ctx);
  if (run->result != HTP_OK) {
    snprintf(run->message, sizeof run->message, "ctx_create: %s",
             htp_world_last_error(run->world));
    return NULL;
  }
  double start = htp_now();
  run->result = run->body(ctx, run->user);
  run->seconds = htp_now() - start;
  snprintf(run->message, sizeof run->message, "%s", htp_last_error(ctx));
  htp_ctx_destroy(ctx);
  return NULL;
}

static htp_world *make_world(int size, double timeout) {
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.world_size = size;
  config.timeout_s = timeout;
  htp_world *world = NULL;
  char message[256];
  htp_result rc = htp_world_create_verbose(&config, &world, message, sizeof message);
  if (rc != HTP_OK) fail_msg("htp_world_create: %s: %s", htp_strerror(rc), message);
  return world;
}

/* Runs body on every rank of world; results land in runs[0..size). */
static void run_ranks(htp_world *world, rank_body body, void *user, rank_run *runs) {
  int size = htp_world_size(world);
  pthread_t threads[MAX_RANKS];
  assert_true(size <= MAX_RANKS);
  for (int rank = 0; rank < size; ++rank) {
    runs[rank] = (rank_run){world, rank, body, user, HTP_ERR_INTERNAL, "", 0};
    assert_int_equal(pthread_create(&threads[rank], NULL, rank_thread, &runs[rank]), 0);
  }
  for (int rank = 0; rank < size; ++rank) pthread_join(threads[rank], NULL);
}

static void expect_all_ok(const rank_run *runs, int size) {
  for (int rank = 0; rank < size; ++rank)
    if (runs[rank].result != HTP_OK)
      fail_msg("rank %d: %s: %s", rank, htp_strerror(runs[rank].result), runs[rank].message);
}

static void expect_result(const rank_run *run, htp_result expected) {
  if (run->result != expected)
    fail_msg("rank %d: got %s (%s), expected %s", run->rank, htp_strerror(run->result),
             run->message, htp_strerror(expected));
}

/* Checks inside a rank: a failed check prints where and returns
 * HTP_ERR_INTERNAL, which the main thread reports. */
#define RANK_CHECK(ctx, condition)                                                             \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      fprintf(stderr, "rank %d: check failed at line %d: %s\n", htp_ctx_rank(ctx), __LINE__,  \
              #condition);                                                                     \
      return HTP_ERR_INTERNAL;                                                                 \
    }                                                                                          \
  } while (0)

#define RANK_CALL(call)                                                                        \
  do {                                                                                         \
    htp_result call_rc_ = (call);                                                              \
    if (call_rc_ != HTP_OK) return call_rc_;                                                   \
  } while (0)

/* ===== 1. Results, configs, contexts ==================================== */

static void test_strerror(void **state) {
  (void)state;
  for (int code = 0; code < HTP_RESULT_COUNT; ++code) {
    const char *text = htp_strerror((htp_result)code);
    assert_non_null(text);
    assert_true(strlen(text) > 0);
    for (int other = 0; other < code; ++other)
      assert_string_not_equal(text, htp_strerror((htp_result)other));
  }
  assert_non_null(htp_strerror(HTP_RESULT_COUNT));
  assert_non_null(htp_strerror((htp_result)-3));
  double a = htp_now(), b = htp_now();
  assert_true(b >= a);
  assert_true(htp_backend_available(HTP_BACKEND_LOCAL));
}

static void expect_config_rejected(htp_config config, htp_result expected, const char *needle) {
  htp_world *world = (htp_world *)&config; /* must be reset to NULL */
  char message[256];
  htp_result rc = htp_world_create_verbose(&config, &world, message, sizeof message);
  assert_int_equal(rc, expected);
  assert_null(world);
  if (!strstr(message, needle)) fail_msg("message \"%s\" lacks \"%s\"", message, needle);
}

static void test_config_errors(void **state) {
  (void)state;
  htp_config good = HTP_CONFIG_INITIALIZER;
  htp_config config = good;
  config.magic = 0;
  expect_config_rejected(config, HTP_ERR_INVALID, "magic");
  config = good;
  config.world_size = 0;
  expect_config_rejected(config, HTP_ERR_INVALID, "world_size");
  config.world_size = -2;
  expect_config_rejected(config, HTP_ERR_INVALID, "world_size");
  config.world_size = HTP_WORLD_MAX_SIZE + 1; /* (1 << 30 allocated 40 GiB) */
  expect_config_rejected(config, HTP_ERR_INVALID, "use 1 to 65536");
  config = good;
  config.timeout_s = 0;
  expect_config_rejected(config, HTP_ERR_INVALID, "timeout_s");
  config.timeout_s = -1;
  expect_config_rejected(config, HTP_ERR_INVALID, "timeout_s");
  config.timeout_s = 1.0000001e7; /* said as it is, not rounded into the range ("1e+07") */
  expect_config_rejected(config, HTP_ERR_INVALID, "timeout_s is 10000001;");
  config = good;
  config.backend = (htp_backend)42;
  expect_config_rejected(config, HTP_ERR_INVALID, "backend");
  config = good;
  config.matmul_precision = 3;
  expect_config_rejected(config, HTP_ERR_INVALID, "matmul_precision is 3");
  config.matmul_precision = -1;
  expect_config_rejected(config, HTP_ERR_INVALID, "matmul_precision is -1");
  /* The fence (a hung process ends itself) is the mpi backend's with ULFM;
   * resting it is harmless elsewhere. */
  assert_int_equal(htp_world_fence_rest(NULL), HTP_ERR_INVALID);
  {
    htp_world *plain = NULL;
    assert_int_equal(htp_world_create(&good, &plain), HTP_OK);
    assert_int_equal(htp_world_fence_rest(plain), HTP_OK);
    htp_world_destroy(plain);
  }
  config = good;
  config.fence = 2;
  expect_config_rejected(config, HTP_ERR_INVALID, "fence is 2; it is 0 or 1");
  config.fence = 1;
  expect_config_rejected(config, HTP_ERR_INVALID, "this is the local backend");
  if (htp_backend_available(HTP_BACKEND_MPI) && !htp_backend_can_shrink(HTP_BACKEND_MPI)) {
    config.backend = HTP_BACKEND_MPI;
    config.world_size = 0;
    expect_config_rejected(config, HTP_ERR_INVALID, "this is the mpi backend without ULFM");
  }
  if (!htp_backend_available(HTP_BACKEND_MPI)) {
    config = good;
    config.backend = HTP_BACKEND_MPI;
    expect_config_rejected(config, HTP_ERR_UNSUPPORTED, "not built");
  }
  /* SM partitions: one GPU's (CUDA or the checked device), among local
   * threads; counts >= 0. */
  const int32_t sms[2] = {32, 0}, negative[2] = {8, -8};
  config = good;
  config.world_size = 2;
  config.sm_counts = sms;
  expect_config_rejected(config, HTP_ERR_INVALID,
                         "device CUDA (or the checked device) and the local backend");
  config.device = HTP_DEVICE_CUDA;
  config.sm_counts = negative;
  expect_config_rejected(config, HTP_ERR_INVALID, "sm_counts[1] is -8");
  config.sm_counts = sms;
  config.backend = HTP_BACKEND_MPI;
  expect_config_rejected(config, HTP_ERR_INVALID, "local backend");
  htp_world *world = NULL;
  char message[256];
  assert_int_equal(htp_world_create_verbose(NULL, &world, message, sizeof message),
                   HTP_ERR_INVALID);
  assert_non_null(strstr(message, "NULL"));
  assert_int_equal(htp_world_create(&good, NULL), HTP_ERR_INVALID);
  htp_world_destroy(NULL);
  htp_ctx_destroy(NULL);
  assert_string_equal(htp_last_error(NULL), "ctx is NULL");
}

/* Two threads whose htp_ctx_create calls fail at once each read their own
 * message (CI once printed a rank's "(no message)": both wrote one buffer,
 * and vsnprintf empties it first). */
typedef struct {
  htp_world *world;
  int rank;    /* out of range: every call fails */
  int mixups;  /* calls whose message was not this thread's */
} create_racer;

static void *race_failing_creates(void *arg) {
  create_racer *racer = arg;
  char expected[64];
  snprintf(expected, sizeof expected, "rank %d is out of range", racer->rank);
  for (int i = 0; i < 20000; i++) {
    htp_ctx *ctx = NULL;
    if (htp_ctx_create(racer->world, racer->rank, &ctx) != HTP_ERR_INVALID ||
        !strstr(htp_world_last_error(racer->world), expected))
      racer->mixups++;
  }
  return NULL;
}

static void test_world_error_per_thread(void **state) {
  (void)state;
  htp_world *world = make_world(2, 1.0);
  create_racer racers[2] = {{world, 7, 0}, {world, 1234567, 0}};
  pthread_t threads[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&threads[i], NULL, race_failing_creates, &racers[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  assert_int_equal(racers[0].mixups, 0);
  assert_int_equal(racers[1].mixups, 0);
  /* This thread made no failing call: nothing to read. */
  assert_string_equal(htp_world_last_error(world), "");
  htp_world_destroy(world);
}

static void test_ctx_errors(void **state) {
  (void)state;
  htp_world *world = make_world(2, 1.0);
  assert_int_equal(htp_world_size(world), 2);
  assert_int_equal(htp_world_process_rank(world), -1);
  assert_int_equal(htp_world_backend(world), HTP_BACKEND_LOCAL);
  assert_int_equal(htp_world_status(world), HTP_OK);
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_ctx_create(world, 2, &ctx), HTP_ERR_INVALID);
  assert_null(ctx);
  assert_non_null(strstr(htp_world_last_error(world), "out of range"));
  assert_int_equal(htp_ctx_create(world, -1, &ctx), HTP_ERR_INVALID);
  assert_int_equal(htp_ctx_create(world, 0, NULL), HTP_ERR_INVALID);
  assert_int_equal(htp_ctx_create(NULL, 0, &ctx), HTP_ERR_INVALID);
  assert_int_equal(htp_ctx_create(world, 1, &ctx), HTP_OK);
  assert_int_equal(htp_ctx_rank(ctx), 1);
  assert_int_equal(htp_ctx_size(ctx), 2);
  assert_int_equal(htp_ctx_device(ctx), -1);
  assert_null(htp_ctx_cuda_stream(ctx));
  assert_ptr_equal(htp_ctx_world(ctx), world);
  assert_string_equal(htp_last_error(ctx), "");
  htp_ctx *twin = NULL;
  assert_int_equal(htp_ctx_create(world, 1, &twin), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_world_last_error(world), "already"));
  htp_ctx_destroy(ctx);
  assert_int_equal(htp_ctx_create(world, 1, &ctx), HTP_OK); /* free again */
  /* Destroying the world under a live context leaves it allocated (said on
   * stderr): the context still works, and a later destroy frees it. */
  htp_world_destroy(world);
  assert_int_equal(htp_ctx_rank(ctx), 1);
  assert_int_equal(htp_fault_point(ctx, 0), HTP_OK);
  htp_ctx_destroy(ctx);
  /* NULL ctx: INVALID, nowhere to write. */
  assert_int_equal(htp_barrier(NULL), HTP_ERR_INVALID);
  assert_int_equal(htp_allreduce_sum_f32(NULL, NULL, NULL, 0), HTP_ERR_INVALID);
  assert_int_equal(htp_fault_point(NULL, 0), HTP_ERR_INVALID);
  htp_abort(NULL, HTP_ERR_REMOTE);
  htp_world_destroy(world);
}

/* The per-call profile: calls booked by their place in each iteration,
 * named by the entry point; nothing before the first iteration; NAN where an
 * iteration made fewer calls; a bounded number of iterations. */
static void test_profile(void **state) {
  (void)state;
  htp_world *world = make_world(1, 1.0);
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  float a[64], b[64];
  for (int i = 0; i < 64; i++) a[i] = b[i] = (float)i;
  assert_int_equal(htp_ctx_error_count(ctx), 0);
  assert_int_equal(htp_ctx_profile_iteration(ctx), HTP_ERR_INVALID); /* not started */
  assert_non_null(strstr(htp_last_error(ctx), "no profile started"));
  assert_int_equal(htp_ctx_error_count(ctx), 1);
  /* The same failure again: the message repeats, the count tells it apart. */
  assert_int_equal(htp_ctx_profile_iteration(ctx), HTP_ERR_INVALID);
  assert_int_equal(htp_ctx_error_count(ctx), 2);
  assert_int_equal(htp_ctx_profile_start(ctx, 0), HTP_ERR_INVALID);
  assert_int_equal(htp_ctx_error_count(ctx), 3);
  assert_int_equal(htp_ctx_error_count(NULL), 0);
  /* A misused profile is the caller's error: the world goes on. */
  assert_int_equal(htp_world_status(world), HTP_OK);
  assert_int_equal(htp_ctx_profile_start(ctx, 2), HTP_OK);
  assert_int_equal(htp_op_add_f32(ctx, a, b, b, 64), HTP_OK); /* before an iteration */
  assert_int_equal(htp_ctx_error_count(ctx), 3); /* successes keep it */
  assert_int_equal(htp_ctx_profile_calls(ctx), 0);
  assert_int_equal(htp_ctx_profile_iteration(ctx), HTP_OK);
  assert_int_equal(htp_op_add_f32(ctx, a, b, b, 64), HTP_OK);
  assert_int_equal(htp_op_gelu_f32(ctx, a, b, 64, 0), HTP_OK);
  assert_int_equal(htp_allreduce_sum_f32(ctx, a, b, 64), HTP_OK);
  assert_int_equal(htp_ctx_profile_iteration(ctx), HTP_OK);
  assert_int_equal(htp_op_add_f32(ctx, a, b, b, 64), HTP_OK); /* a shorter second iteration */
  assert_int_equal(htp_ctx_profile_calls(ctx), 3);
  const char *want[] = {"htp_op_add_f32", "htp_op_gelu_f32", "htp_allreduce_sum_f32"};
  for (int k = 0; k < 3; k++) {
    const double *seconds = NULL;
    assert_string_equal(htp_ctx_profile_call(ctx, k, &seconds), want[k]);
    assert_true(seconds[0] >= 0.0 && seconds[0] < 1.0);
    assert_true(k == 0 ? seconds[1] >= 0.0 : isnan(seconds[1]));
  }
  assert_null(htp_ctx_profile_call(ctx, 3, NULL));
  assert_null(htp_ctx_profile_call(ctx, -1, NULL));
  /* The runtime's own calls (a mark, a copy to the host) are not booked. */
  assert_int_equal(htp_ctx_mark(ctx, 0), HTP_OK);
  assert_int_equal(htp_ctx_mark(ctx, 1), HTP_OK);
  double elapsed;
  assert_int_equal(htp_ctx_elapsed(ctx, &elapsed), HTP_OK);
  assert_int_equal(htp_ctx_profile_calls(ctx), 3);
  /* Two iterations were asked for. */
  assert_int_equal(htp_ctx_profile_iteration(ctx), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "holds 2 iterations"));
  assert_int_equal(htp_world_status(world), HTP_OK);
  /* Past them nothing is booked: no new place, no overwritten second. */
  for (int i = 0; i < 4; i++)
    assert_int_equal(htp_op_gelu_f32(ctx, a, b, 64, 0), HTP_OK);
  assert_int_equal(htp_ctx_profile_calls(ctx), 3);
  const double *kept = NULL;
  assert_non_null(htp_ctx_profile_call(ctx, 1, &kept));
  assert_true(isnan(kept[1]));
  assert_null(htp_ctx_profile_call(ctx, 7, &kept)); /* a bad place clears *seconds */
  assert_null(kept);
  /* Room is bounded: a double per place per iteration. */
  assert_int_equal(htp_ctx_profile_start(ctx, HTP_PROFILE_MAX_ITERATIONS + 1), HTP_ERR_INVALID);
  assert_int_equal(htp_ctx_profile_start(ctx, HTP_PROFILE_MAX_ITERATIONS), HTP_OK);
  htp_ctx_profile_stop(ctx);
  assert_int_equal(htp_ctx_profile_calls(ctx), 0);
  htp_ctx_profile_stop(ctx); /* idempotent */
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
}

/* ===== 2. Collectives against closed forms ============================== */

typedef struct sizes {
  size_t count;
  int in_place;
} sizes;

/* Rank r contributes (r + 1) * (i % 7 + 1): the sum is exact in floats. */
static htp_result body_allreduce_closed_form(htp_ctx *ctx, void *user) {
  const sizes *shape = user;
  int rank = htp_ctx_rank(ctx), size = htp_ctx_size(ctx);
  size_t count = shape->count;
  float *send = malloc((count + 1) * sizeof(float));
  float *recv = shape->in_place ? send : malloc((count + 1) * sizeof(float));
  RANK_CHECK(ctx, send && recv);
  for (int repeat = 0; repeat < 3; ++repeat) {
    for (size_t i = 0; i < count; ++i) send[i] = (float)((rank + 1) * (int)(i % 7 + 1));
    htp_result rc = htp_allreduce_sum_f32(ctx, send, recv, count);
    if (rc != HTP_OK) {
      free(send);
      if (recv != send) free(recv);
      return rc;
    }
    float total = (float)(size * (size + 1) / 2);
    for (size_t i = 0; i < count; ++i)
      if (recv[i] != total * (float)(i % 7 + 1)) {
        fprintf(stderr, "rank %d: recv[%zu] = %g, expected %g\n", rank, i, recv[i],
                total * (float)(i % 7 + 1));
        free(send);
        if (recv != send) free(recv);
        return HTP_ERR_INTERNAL;
      }
  }
  free(send);
  if (recv != send) free(recv);
  return HTP_OK;
}

static void test_allreduce_closed_form(void **state) {
  (void)state;
  const int world_sizes[] = {1, 2, 3, 4, 7};
  const size_t counts[] = {0, 1, 5, 16, 17, 1000, 100003};
  for (size_t w = 0; w < sizeof world_sizes / sizeof *world_sizes; ++w) {
    htp_world *world = make_world(world_sizes[w], 10.0);
    for (size_t c = 0; c < sizeof counts / sizeof *counts; ++c)
      for (int in_place = 0; in_place < 2; ++in_place) {
        sizes shape = {counts[c], in_place};
        rank_run runs[MAX_RANKS];
        run_ranks(world, body_allreduce_closed_form, &shape, runs);
        expect_all_ok(runs, world_sizes[w]);
      }
    htp_world_destroy(world);
  }
}

/* Random data: every rank's result equals the serial left-to-right sum bit
 * for bit, on every rank and in every repetition. */
enum { REPRO_COUNT = 50021, REPRO_RANKS = 5 };

static float repro_value(int rank, size_t i) {
  uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503u + 17u);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return ((float)(x % 2000003u) / 1000.0f - 1000.0f) * (rank % 2 ? 1e-3f : 1.0f);
}

typedef struct repro {
  float *results[REPRO_RANKS][2];
} repro;

static htp_result body_repro(htp_ctx *ctx, void *user) {
  repro *data = user;
  int rank = htp_ctx_rank(ctx);
  float *send = malloc(REPRO_COUNT * sizeof(float));
  RANK_CHECK(ctx, send);
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (size_t i = 0; i < REPRO_COUNT; ++i) send[i] = repro_value(rank, i);
    float *recv = data->results[rank][repeat];
    htp_result rc = htp_allreduce_sum_f32(ctx, send, recv, REPRO_COUNT);
    if (rc != HTP_OK) {
      free(send);
      return rc;
    }
  }
  free(send);
  return HTP_OK;
}

static void test_allreduce_reproducible(void **state) {
  (void)state;
  float *expected = malloc(REPRO_COUNT * sizeof(float));
  assert_non_null(expected);
  for (size_t i = 0; i < REPRO_COUNT; ++i) {
    float sum = repro_value(0, i);
    for (int rank = 1; rank < REPRO_RANKS; ++rank) sum += repro_value(rank, i);
    expected[i] = sum;
  }
  for (int world_run = 0; world_run < 2; ++world_run) {
    repro data;
    for (int rank = 0; rank < REPRO_RANKS; ++rank)
      for (int repeat = 0; repeat < 2; ++repeat) {
        data.results[rank][repeat] = malloc(REPRO_COUNT * sizeof(float));
        assert_non_null(data.results[rank][repeat]);
      }
    htp_world *world = make_world(REPRO_RANKS, 10.0);
    rank_run runs[MAX_RANKS];
    run_ranks(world, body_repro, &data, runs);
    expect_all_ok(runs, REPRO_RANKS);
    htp_world_destroy(world);
    for (int rank = 0; rank < REPRO_RANKS; ++rank)
      for (int repeat = 0; repeat < 2; ++repeat) {
        assert_memory_equal(data.results[rank][repeat], expected, REPRO_COUNT * sizeof(float));
        free(data.results[rank][repeat]);
      }
  }
  free(expected);
}

typedef struct gather_shape {
  size_t bytes;
  int in_place;
} gather_shape;

static htp_result body_allgather(htp_ctx *ctx, void *user) {
  const gather_shape *shape = user;
  int rank = htp_ctx_rank(ctx), size = htp_ctx_size(ctx);
  size_t bytes = shape->bytes;
  unsigned char *recv = malloc((size_t)size * bytes + 1);
  unsigned char *mine = malloc(bytes + 1);
  RANK_CHECK(ctx, recv && mine);
  memset(recv, 0xee, (size_t)size * bytes);
  unsigned char *send = shape->in_place ? recv + (size_t)rank * bytes : mine;
  for (size_t i = 0; i < bytes; ++i) send[i] = (unsigned char)(rank * 31 + i);
  htp_result rc = htp_allgather(ctx, send, recv, bytes);
  for (int from = 0; rc == HTP_OK && from < size; ++from)
    for (size_t i = 0; i < bytes; ++i)
      if (recv[(size_t)from * bytes + i] != (unsigned char)(from * 31 + i)) rc = HTP_ERR_INTERNAL;
  free(recv);
  free(mine);
  return rc;
}

/* bf16: every rank's parts summed in f32 in rank order and rounded once
 * (values chosen so that rounding per step would differ: 1 + 3 * 2^-9
 * summed step by step in bf16 stays 1, once rounded it is 1 + 2^-7). */
enum { BF16_COUNT = 3000 }; /* several tiles, odd chunk boundaries */

static float bf16_part(int rank, size_t i) {
  return rank == 0 ? 1.0f : (i % 2 ? 0.001953125f : (float)rank * 0.5f - (float)(i % 7));
}

static htp_result body_allreduce_bf16(htp_ctx *ctx, void *user) {
  (void)user;
  int rank = htp_ctx_rank(ctx), size = htp_ctx_size(ctx);
  uint16_t send[BF16_COUNT], recv[BF16_COUNT];
  for (size_t i = 0; i < BF16_COUNT; ++i) send[i] = htp_bf16_from_f32(bf16_part(rank, i));
  RANK_CALL(htp_allreduce_sum_bf16(ctx, send, recv, BF16_COUNT));
  for (size_t i = 0; i < BF16_COUNT; ++i) {
    float sum = 0.0f;
    for (int r = 0; r < size; ++r) sum += htp_bf16_to_f32(htp_bf16_from_f32(bf16_part(r, i)));
    RANK_CHECK(ctx, recv[i] == htp_bf16_from_f32(sum));
  }
  if (size == 4) RANK_CHECK(ctx, htp_bf16_to_f32(recv[1]) == 1.0078125f);
  /* In place. */
  RANK_CALL(htp_allreduce_sum_bf16(ctx, send, send, BF16_COUNT));
  RANK_CHECK(ctx, memcmp(send, recv, sizeof send) == 0);
  return HTP_OK;
}

static void test_allreduce_bf16(void **state) {
  (void)state;
  for (int size = 1; size <= 4; ++size) {
    htp_world *world = make_world(size, 10.0);
    rank_run runs[MAX_RANKS];
    run_ranks(world, body_allreduce_bf16, NULL, runs);
    expect_all_ok(runs, size);
    htp_world_destroy(world);
  }
}

/* The all-reduce with a bias and a residual (a row-parallel layer's sum):
 * every shape of rows and cols (row lengths that are not a multiple of the
 * 32-element line, more ranks than rows), each of bias and residual alone
 * or together, in place or not, f32 and bf16. Integer values, so every sum
 * is exact in either type and the result can be compared bit for bit
 * whatever the order of the adds; each rank's part differs. The local
 * backend adds each rank's bias and residual to the rows it sums, so the
 * closed form holds on every rank only if every row was summed and added
 * once, by someone. */
typedef struct epilogue_shape {
  int64_t rows, cols;
  int bias, residual, in_place, bf16, norm;
} epilogue_shape;

static float epilogue_part(int rank, int64_t i) { return (float)((rank * 7 + i * 3) % 11) - 5; }
static float epilogue_bias(int64_t c) { return (float)(c % 5) - 2; }
static float epilogue_residual(int64_t i) { return (float)(i % 9) - 4; }

static htp_result body_allreduce_bias_residual(htp_ctx *ctx, void *user) {
  const epilogue_shape *shape = user;
  const int rank = htp_ctx_rank(ctx), size = htp_ctx_size(ctx);
  const int64_t n = shape->rows * shape->cols;
  float *send = malloc((size_t)n * sizeof *send), *recv = malloc((size_t)n * sizeof *recv);
  float *bias = malloc((size_t)shape->cols * sizeof *bias), *r = malloc((size_t)n * sizeof *r);
  uint16_t *send16 = malloc((size_t)n * 2), *recv16 = malloc((size_t)n * 2);
  uint16_t *bias16 = malloc((size_t)shape->cols * 2), *r16 = malloc((size_t)n * 2);
  htp_result rc = send && recv && bias && r && send16 && recv16 && bias16 && r16 ? HTP_OK
                                                                                  : HTP_ERR_NOMEM;
  for (int64_t i = 0; rc == HTP_OK && i < n; ++i) {
    send[i] = epilogue_part(rank, i), r[i] = epilogue_residual(i), recv[i] = NAN;
    send16[i] = htp_bf16_from_f32(send[i]), r16[i] = htp_bf16_from_f32(r[i]), recv16[i] = 0xffff;
  }
  for (int64_t c = 0; rc == HTP_OK && c < shape->cols; ++c)
    bias[c] = epilogue_bias(c), bias16[c] = htp_bf16_from_f32(bias[c]);
  /* The norm's weights: gamma 1 + c / 8, beta c / 16 - 1 (exact in bf16). */
  float *gamma = malloc((size_t)shape->cols * sizeof *gamma), *beta = malloc((size_t)shape->cols *
                                                                             sizeof *beta);
  uint16_t *gamma16 = malloc((size_t)shape->cols * 2), *beta16 = malloc((size_t)shape->cols * 2);
  float *normed = malloc((size_t)n * sizeof *normed);
  uint16_t *normed16 = malloc((size_t)n * 2);
  if (!gamma || !beta || !gamma16 || !beta16 || !normed || !normed16) rc = HTP_ERR_NOMEM;
  for (int64_t c = 0; rc == HTP_OK && c < shape->cols; ++c) {
    gamma[c] = 1.0f + (float)(c % 8) / 8, beta[c] = (float)(c % 32) / 16 - 1;
    gamma16[c] = htp_bf16_from_f32(gamma[c]), beta16[c] = htp_bf16_from_f32(beta[c]);
  }
  const float epsilon = 1e-5f;
  if (rc == HTP_OK && shape->bf16 && shape->norm)
    rc = htp_allreduce_sum_norm_bf16(ctx, send16, shape->bias ? bias16 : NULL,
                                     shape->residual ? r16 : NULL,
                                     shape->in_place ? send16 : recv16, gamma16, beta16,
                                     normed16, shape->rows, shape->cols, epsilon);
  else if (rc == HTP_OK && shape->norm)
    rc = htp_allreduce_sum_norm_f32(ctx, send, shape->bias ? bias : NULL,
                                    shape->residual ? r : NULL, shape->in_place ? send : recv,
                                    gamma, beta, normed, shape->rows, shape->cols, epsilon);
  else if (rc == HTP_OK && shape->bf16)
    rc = htp_allreduce_sum_bias_residual_bf16(ctx, send16, shape->bias ? bias16 : NULL,
                                              shape->residual ? r16 : NULL,
                                              shape->in_place ? send16 : recv16, shape->rows,
                                              shape->cols);
  else if (rc == HTP_OK)
    rc = htp_allreduce_sum_bias_residual_f32(ctx, send, shape->bias ? bias : NULL,
                                             shape->residual ? r : NULL,
                                             shape->in_place ? send : recv, shape->rows,
                                             shape->cols);
  for (int64_t i = 0; rc == HTP_OK && i < n; ++i) {
    float want = 0.0f;
    for (int from = 0; from < size; ++from) want += epilogue_part(from, i);
    if (shape->bias) want += epilogue_bias(i % shape->cols);
    if (shape->residual) want += epilogue_residual(i);
    const float got = shape->bf16 ? htp_bf16_to_f32((shape->in_place ? send16 : recv16)[i])
                                  : (shape->in_place ? send : recv)[i];
    if (got != want) {
      fprintf(stderr, "rank %d of %d, %lld x %lld (bias %d, residual %d, in place %d, bf16 %d): "
              "element %lld is %g, not %g\n", rank, size, (long long)shape->rows,
              (long long)shape->cols, shape->bias, shape->residual, shape->in_place, shape->bf16,
              (long long)i, got, want);
      rc = HTP_ERR_INTERNAL;
    }
  }
  /* The norm of the (checked) sum, as the CPU's layer norm gives it over the
   * whole tensor: the rows each rank normalised must be the same bits. */
  if (rc == HTP_OK && shape->norm) {
    float *want = malloc((size_t)n * sizeof *want);
    uint16_t *want16 = malloc((size_t)n * 2);
    rc = want && want16 ? HTP_OK : HTP_ERR_NOMEM;
    if (rc == HTP_OK && shape->bf16)
      rc = htp_op_layer_norm_bf16(NULL, shape->in_place ? send16 : recv16, gamma16, beta16, want16,
                                  shape->rows, shape->cols, epsilon);
    else if (rc == HTP_OK)
      rc = htp_op_layer_norm_f32(NULL, shape->in_place ? send : recv, gamma, beta, want,
                                 shape->rows, shape->cols, epsilon);
    if (rc == HTP_OK && (shape->bf16 ? memcmp(want16, normed16, (size_t)n * 2)
                                     : memcmp(want, normed, (size_t)n * sizeof *want))) {
      fprintf(stderr, "rank %d of %d, %lld x %lld (bf16 %d): the norm differs from the CPU's\n",
              rank, size, (long long)shape->rows, (long long)shape->cols, shape->bf16);
      rc = HTP_ERR_INTERNAL;
    }
    free(want), free(want16);
  }
  free(send), free(recv), free(bias), free(r), free(send16), free(recv16), free(bias16), free(r16);
  free(gamma), free(beta), free(gamma16), free(beta16), free(normed), free(normed16);
  return rc;
}

/* With neither a bias nor a residual it is the plain sum, on every backend. */
static htp_result body_epilogue_none_is_plain(htp_ctx *ctx, void *user) {
  (void)user;
  float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  if (htp_ctx_rank(ctx) == 0) RANK_CALL(htp_allreduce_sum_f32(ctx, data, data, 8));
  else RANK_CALL(htp_allreduce_sum_bias_residual_f32(ctx, data, NULL, NULL, data, 2, 4));
  for (int i = 0; i < 8; ++i) RANK_CHECK(ctx, data[i] == (float)(i + 1) * htp_ctx_size(ctx));
  return HTP_OK;
}

static void test_allreduce_bias_residual(void **state) {
  (void)state;
  {
    htp_world *world = make_world(3, 10.0);
    rank_run runs[MAX_RANKS];
    run_ranks(world, body_epilogue_none_is_plain, NULL, runs);
    expect_all_ok(runs, 3);
    htp_world_destroy(world);
  }
  const int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 33}, {64, 12}, {2, 100}, {37, 64}};
  for (int size = 1; size <= 4; ++size)
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; ++k)
      for (int parts = 0; parts < 8; ++parts) {
        epilogue_shape shape = {shapes[k][0], shapes[k][1], parts & 1, (parts >> 1) & 1,
                                (parts >> 2) & 1, (int)(k % 2), (int)((k + parts) % 2)};
        if (!shape.bias && !shape.residual && !shape.norm)
          shape.bias = shape.residual = 1, shape.bf16 ^= 1;
        htp_world *world = make_world(size, 10.0);
        rank_run runs[MAX_RANKS];
        run_ranks(world, body_allreduce_bias_residual, &shape, runs);
        expect_all_ok(runs, size);
        htp_world_destroy(world);
      }
}

/* The group layer norm: every rank holds the same x; each normalises its
 * rows (local backend; on a device in proportion to the SMs) and the
 * others copy them, so every rank's y must be the CPU layer norm of the
 * whole of x, bit for bit, y poisoned before. On the CPU and on the
 * checked device (device memory from its arena, uneven SM counts). */
typedef struct group_norm_shape {
  int64_t rows, cols;
  int bf16, device;
} group_norm_shape;

/* n bytes of the context's memory holding host's, or NULL. */
static void *on_ctx(htp_ctx *ctx, const void *host, size_t n, int device) {
  if (!device) return (void *)host;
  void *at = NULL;
  if (htp_mem_alloc(ctx, n, &at) != HTP_OK) return NULL;
  if (htp_mem_upload(ctx, at, host, n) != HTP_OK) return htp_mem_free(ctx, at), NULL;
  return at;
}

static htp_result body_group_layer_norm(htp_ctx *ctx, void *user) {
  const group_norm_shape *shape = user;
  const int64_t n = shape->rows * shape->cols;
  const size_t elem = shape->bf16 ? 2 : 4, bytes = (size_t)n * elem, row = (size_t)shape->cols * elem;
  float *x = malloc((size_t)n * 4), *gamma = malloc((size_t)shape->cols * 4);
  float *beta = malloc((size_t)shape->cols * 4);
  unsigned char *y = malloc(bytes), *want = malloc(bytes);
  uint16_t *x16 = malloc((size_t)n * 2), *gamma16 = malloc((size_t)shape->cols * 2);
  uint16_t *beta16 = malloc((size_t)shape->cols * 2);
  htp_result rc = x && gamma && beta && y && want && x16 && gamma16 && beta16 ? HTP_OK
                                                                             : HTP_ERR_NOMEM;
  for (int64_t i = 0; rc == HTP_OK && i < n; ++i)
    x[i] = (float)((i * 37) % 23) / 4 - 2.5f, x16[i] = htp_bf16_from_f32(x[i]);
  for (int64_t c = 0; rc == HTP_OK && c < shape->cols; ++c) {
    gamma[c] = 1.0f + (float)(c % 8) / 8, beta[c] = (float)(c % 32) / 16 - 1;
    gamma16[c] = htp_bf16_from_f32(gamma[c]), beta16[c] = htp_bf16_from_f32(beta[c]);
  }
  const float epsilon = 1e-6f;
  const void *hx = shape->bf16 ? (const void *)x16 : x, *hg = shape->bf16 ? (const void *)gamma16 : gamma;
  const void *hb = shape->bf16 ? (const void *)beta16 : beta;
  if (rc == HTP_OK) memset(y, 0xff, bytes); /* NaN in either type */
  void *dx = rc == HTP_OK ? on_ctx(ctx, hx, bytes, shape->device) : NULL;
  void *dg = rc == HTP_OK ? on_ctx(ctx, hg, row, shape->device) : NULL;
  void *db = rc == HTP_OK ? on_ctx(ctx, hb, row, shape->device) : NULL;
  void *dy = rc == HTP_OK ? on_ctx(ctx, y, bytes, shape->device) : NULL;
  if (rc == HTP_OK && !(dx && dg && db && dy)) rc = HTP_ERR_NOMEM;
  if (rc == HTP_OK)
    rc = shape->bf16 ? htp_group_layer_norm_bf16(ctx, dx, dg, db, dy, shape->rows, shape->cols,
                                                 epsilon)
                     : htp_group_layer_norm_f32(ctx, dx, dg, db, dy, shape->rows, shape->cols,
                                                epsilon);
  if (rc == HTP_OK && shape->device) rc = htp_mem_download(ctx, y, dy, bytes);
  if (rc == HTP_OK)
    rc = shape->bf16 ? htp_op_layer_norm_bf16(NULL, x16, gamma16, beta16, (uint16_t *)want,
                                              shape->rows, shape->cols, epsilon)
                     : htp_op_layer_norm_f32(NULL, x, gamma, beta, (float *)want, shape->rows,
                                             shape->cols, epsilon);
  if (rc == HTP_OK && memcmp(want, y, bytes)) {
    fprintf(stderr, "rank %d of %d, %lld x %lld (bf16 %d, device %d): the group norm differs "
            "from the CPU's\n", htp_ctx_rank(ctx), htp_ctx_size(ctx), (long long)shape->rows,
            (long long)shape->cols, shape->bf16, shape->device);
    rc = HTP_ERR_INTERNAL;
  }
  if (shape->device) {
    void *held[] = {dx, dg, db, dy};
    for (size_t i = 0; i < sizeof held / sizeof *held; ++i)
      if (held[i]) htp_mem_free(ctx, held[i]);
  }
  free(x), free(gamma), free(beta), free(y), free(want), free(x16), free(gamma16), free(beta16);
  return rc;
}

static void test_group_layer_norm(void **state) {
  (void)state;
  const int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 33}, {64, 12}, {2, 100}, {37, 64}, {200, 8}};
  const int32_t sms[] = {8, 24, 32, 48}; /* rank 0 on few SMs: few rows */
  for (int size = 1; size <= 4; ++size)
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; ++k)
      for (int variant = 0; variant < 4; ++variant) {
        group_norm_shape shape = {shapes[k][0], shapes[k][1], variant & 1, variant >> 1};
        htp_config config = HTP_CONFIG_INITIALIZER;
        config.world_size = size;
        config.timeout_s = 10.0;
        if (shape.device) config.device = HTP_DEVICE_CHECKED, config.sm_counts = sms;
        htp_world *world = NULL;
        char message[256];
        if (htp_world_create_verbose(&config, &world, message, sizeof message) != HTP_OK)
          fail_msg("htp_world_create: %s", message);
        rank_run runs[MAX_RANKS];
        run_ranks(world, body_group_layer_norm, &shape, runs);
        expect_all_ok(runs, size);
        htp_world_destroy(world);
      }
}

/* Its arguments are checked on every backend and device, before it
 * decides whether to share: here on one rank, a fresh world each (a
 * refusal fails the world). */
static void test_group_layer_norm_refusals(void **state) {
  (void)state;
  const char *const needles[] = {"overlaps x", "overlaps x", "the weight ((nil))",
                                 "epsilon 0 must be positive", "rows 0 and cols 2",
                                 "htp_group_layer_norm_f32: epsilon inf must be positive",
                                 "overlaps x"};
  for (int i = 0; i < 7; ++i) {
    htp_world *world = make_world(1, 2.0);
    htp_ctx *ctx = NULL;
    assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
    float x[4] = {1, 2, 3, 4}, g[2] = {1, 1}, y[4];
    const htp_result got =
        i == 0   ? htp_group_layer_norm_f32(ctx, x, g, g, x, 2, 2, 1e-5f)
        : i == 1 ? htp_group_layer_norm_f32(ctx, x, g, g, x + 1, 1, 2, 1e-5f)
        : i == 2 ? htp_group_layer_norm_f32(ctx, x, NULL, g, y, 2, 2, 1e-5f)
        : i == 3 ? htp_group_layer_norm_f32(ctx, x, g, g, y, 2, 2, 0.0f)
        : i == 4 ? htp_group_layer_norm_f32(ctx, x, g, g, y, 0, 2, 1e-5f)
        /* refused by the group norm itself (not later by the layer norm
         * it runs on one rank) */
        : i == 5 ? htp_group_layer_norm_f32(ctx, x, g, g, y, 2, 2, INFINITY)
                 /* the weight where a peer's rows land (the layer norm on
                  * one rank took it) */
                 : htp_group_layer_norm_f32(ctx, x, y + 2, g, y, 2, 2, 1e-5f);
    assert_int_equal(got, HTP_ERR_INVALID);
    if (!strstr(htp_last_error(ctx), needles[i]))
      fail_msg("case %d: \"%s\" lacks \"%s\"", i, htp_last_error(ctx), needles[i]);
    htp_ctx_destroy(ctx);
    htp_world_destroy(world);
  }
}

static void test_allgather(void **state) {
  (void)state;
  const size_t byte_counts[] = {0, 1, 3, 4096, 100001};
  for (int size = 1; size <= 4; ++size) {
    htp_world *world = make_world(size, 10.0);
    for (size_t b = 0; b < sizeof byte_counts / sizeof *byte_counts; ++b)
      for (int in_place = 0; in_place < 2; ++in_place) {
        gather_shape shape = {byte_counts[b], in_place};
        rank_run runs[MAX_RANKS];
        run_ranks(world, body_allgather, &shape, runs);
        expect_all_ok(runs, size);
      }
    htp_world_destroy(world);
  }
}

static htp_result body_broadcast_and_barrier(htp_ctx *ctx, void *user) {
  (void)user;
  int rank = htp_ctx_rank(ctx), size = htp_ctx_size(ctx);
  enum { BYTES = 10007 };
  unsigned char *buffer = malloc(BYTES);
  RANK_CHECK(ctx, buffer);
  htp_result rc = HTP_OK;
  for (int root = 0; rc == HTP_OK && root < size; ++root) {
    for (size_t i = 0; i < BYTES; ++i) buffer[i] = (unsigned char)(rank == root ? root + i : 0xff);
    rc = htp_broadcast(ctx, buffer, BYTES, root);
    for (size_t i = 0; rc == HTP_OK && i < BYTES; ++i)
      if (buffer[i] != (unsigned char)(root + i)) rc = HTP_ERR_INTERNAL;
    if (rc == HTP_OK) rc = htp_barrier(ctx);
  }
  if (rc == HTP_OK) rc = htp_broadcast(ctx, NULL, 0, size - 1);
  free(buffer);
  return rc;
}

static void test_broadcast_and_barrier(void **state) {
  (void)state;
  for (int size = 1; size <= 5; ++size) {
    htp_world *world = make_world(size, 10.0);
    rank_run runs[MAX_RANKS];
    run_ranks(world, body_broadcast_and_barrier, NULL, runs);
    expect_all_ok(runs, size);
    htp_world_destroy(world);
  }
}

/* Ring: each rank sends to rank + 1 and receives from rank - 1, on two tags;
 * even ranks send first, odd ranks receive first (send blocks). */
static htp_result body_ring(htp_ctx *ctx, void *user) {
  (void)user;
  int rank = htp_ctx_rank(ctx), size = htp_ctx_size(ctx);
  int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  enum { BYTES = 65536 + 3 };
  unsigned char *out = malloc(BYTES), *in = malloc(BYTES), *expected = malloc(BYTES);
  RANK_CHECK(ctx, out && in && expected);
  htp_result rc = HTP_OK;
  for (int tag = 0; rc == HTP_OK && tag < 2; ++tag) {
    for (size_t i = 0; i < BYTES; ++i) {
      out[i] = (unsigned char)(rank * 7 + tag * 3 + i);
      expected[i] = (unsigned char)(previous * 7 + tag * 3 + i);
    }
    if (rank % 2 == 0) {
      rc = htp_send(ctx, out, BYTES, next, tag);
      if (rc == HTP_OK) rc = htp_recv(ctx, in, BYTES, previous, tag);
    } else {
      rc = htp_recv(ctx, in, BYTES, previous, tag);
      if (rc == HTP_OK) rc = htp_send(ctx, out, BYTES, next, tag);
    }
    if (rc == HTP_OK && memcmp(in, expected, BYTES) != 0) rc = HTP_ERR_INTERNAL;
  }
  free(out);
  free(in);
  free(expected);
  return rc;
}

static void test_send_recv_ring(void **state) {
  (void)state;
  const int world_sizes[] = {2, 4}; /* even, so that the ring does not deadlock */
  for (size_t w = 0; w < 2; ++w) {
    htp_world *world = make_world(world_sizes[w], 10.0);
    rank_run runs[MAX_RANKS];
    run_ranks(world, body_ring, NULL, runs);
    expect_all_ok(runs, world_sizes[w]);
    htp_world_destroy(world);
  }
}

/* Several worlds at once, each in its own set of threads. */
typedef struct world_job {
  htp_world *world;
  rank_run runs[MAX_RANKS];
} world_job;

static htp_result body_many_allreduces(htp_ctx *ctx, void *user) {
  (void)user;
  sizes shape = {4099, 0};
  for (int i = 0; i < 20; ++i) RANK_CALL(body_allreduce_closed_form(ctx, &shape));
  return htp_barrier(ctx);
}

static void *world_job_thread(void *argument) {
  world_job *job = argument;
  run_ranks(job->world, body_many_allreduces, NULL, job->runs);
  return NULL;
}

static void test_concurrent_worlds(void **state) {
  (void)state;
  enum { WORLDS = 3 };
  world_job jobs[WORLDS];
  pthread_t threads[WORLDS];
  for (int w = 0; w < WORLDS; ++w) {
    jobs[w].world = make_world(w + 2, 10.0);
    assert_int_equal(pthread_create(&threads[w], NULL, world_job_thread, &jobs[w]), 0);
  }
  for (int w = 0; w < WORLDS; ++w) pthread_join(threads[w], NULL);
  for (int w = 0; w < WORLDS; ++w) {
    expect_all_ok(jobs[w].runs, w + 2);
    htp_world_destroy(jobs[w].world);
  }
}

/* ===== 3. Bad arguments ================================================= */

/* The rank given in `culprit` makes a bad call; the others make the good
 * one. The culprit gets INVALID with a message, the others REMOTE (or
 * INVALID when they can see the mismatch themselves). */
typedef htp_result (*bad_call)(htp_ctx *ctx, int culprit);

typedef struct bad_case {
  const char *name;
  bad_call call;
  int culprit;
  const char *needle;        /* in the culprit's message */
  htp_result others_expected; /* what the other ranks get */
} bad_case;

static htp_result bad_null_send(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4};
  return htp_allreduce_sum_f32(ctx, htp_ctx_rank(ctx) == culprit ? NULL : data, data, 4);
}
static htp_result bad_count_mismatch(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4};
  return htp_allreduce_sum_f32(ctx, data, data, htp_ctx_rank(ctx) == culprit ? 3 : 4);
}
static htp_result bad_op_mismatch(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4};
  if (htp_ctx_rank(ctx) == culprit) return htp_barrier(ctx);
  return htp_allreduce_sum_f32(ctx, data, data, 4);
}
static htp_result bad_dtype_mismatch(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4};
  uint16_t half[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
  if (htp_ctx_rank(ctx) == culprit) return htp_allreduce_sum_bf16(ctx, half, half, 4);
  return htp_allreduce_sum_f32(ctx, data, data, 4);
}
/* A plain all-reduce meeting one with a bias (chunked by rows): refused, as
 * the two would split the elements differently. */
static htp_result bad_epilogue_mismatch(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, bias[2] = {1, 1};
  if (htp_ctx_rank(ctx) == culprit) return htp_allreduce_sum_f32(ctx, data, data, 4);
  return htp_allreduce_sum_bias_residual_f32(ctx, data, bias, NULL, data, 2, 2);
}
static htp_result bad_row_mismatch(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, bias[4] = {1, 1, 1, 1};
  const int wide = htp_ctx_rank(ctx) == culprit;
  return htp_allreduce_sum_bias_residual_f32(ctx, data, bias, NULL, data, wide ? 1 : 2,
                                             wide ? 4 : 2);
}
/* Each rank adds its own bias and residual to the rows it sums: a rank
 * without one, or norming with another epsilon, made rows unlike the
 * others' with HTP_OK on every rank. */
static htp_result bad_residual_missing(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, bias[2] = {1, 1}, r[4] = {5, 5, 5, 5};
  return htp_allreduce_sum_bias_residual_f32(ctx, data, bias,
                                             htp_ctx_rank(ctx) == culprit ? NULL : r, data, 2, 2);
}
static htp_result bad_norm_bias_missing(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, bias[2] = {1, 1}, g[2] = {1, 1}, normed[4];
  return htp_allreduce_sum_norm_f32(ctx, data, htp_ctx_rank(ctx) == culprit ? NULL : bias, NULL,
                                    data, g, g, normed, 2, 2, 1e-5f);
}
static htp_result bad_epsilon_mismatch(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, g[2] = {1, 1}, normed[4];
  return htp_allreduce_sum_norm_f32(ctx, data, NULL, NULL, data, g, g, normed, 2, 2,
                                    htp_ctx_rank(ctx) == culprit ? 1e6f : 1e-5f);
}
static htp_result bad_group_epsilon_mismatch(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, g[2] = {1, 1}, normed[4];
  return htp_group_layer_norm_f32(ctx, data, g, g, normed, 2, 2,
                                  htp_ctx_rank(ctx) == culprit ? 1e6f : 1e-5f);
}
static htp_result bad_residual_overlap(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, r[5] = {0};
  return htp_allreduce_sum_bias_residual_f32(ctx, data, NULL,
                                             htp_ctx_rank(ctx) == culprit ? data + 1 : r, data,
                                             2, 2);
}
static htp_result bad_bias_overlap(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, bias[2] = {1, 1};
  return htp_allreduce_sum_bias_residual_f32(ctx, data, htp_ctx_rank(ctx) == culprit ? data + 2
                                                                                       : bias,
                                             NULL, data, 2, 2);
}
static htp_result bad_normed_overlap(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, g[2] = {1, 1}, normed[4];
  return htp_allreduce_sum_norm_f32(ctx, data, NULL, NULL, data, g, g,
                                    htp_ctx_rank(ctx) == culprit ? data : normed, 2, 2, 1e-5f);
}
static htp_result bad_norm_epsilon(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, g[2] = {1, 1}, normed[4];
  return htp_allreduce_sum_norm_f32(ctx, data, NULL, NULL, data, g, g, normed, 2, 2,
                                    htp_ctx_rank(ctx) == culprit ? 0.0f : 1e-5f);
}
/* An infinite epsilon gave every normed row its beta: refused before the
 * collective (the culprit alone; the peer hears it), not as an epsilon
 * mismatch or by the norm a rank runs on its rows. */
static htp_result bad_norm_epsilon_inf(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, g[2] = {1, 1}, normed[4];
  return htp_allreduce_sum_norm_f32(ctx, data, NULL, NULL, data, g, g, normed, 2, 2,
                                    htp_ctx_rank(ctx) == culprit ? INFINITY : 1e-5f);
}
/* A group layer norm meeting an all-reduce with a norm (no sum against
 * a sum): refused by name. */
static htp_result bad_group_norm_mismatch(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, g[2] = {1, 1}, normed[4];
  if (htp_ctx_rank(ctx) == culprit)
    return htp_allreduce_sum_norm_f32(ctx, data, NULL, NULL, data, g, g, normed, 2, 2, 1e-5f);
  return htp_group_layer_norm_f32(ctx, data, g, g, normed, 2, 2, 1e-5f);
}
static htp_result bad_epilogue_rows(htp_ctx *ctx, int culprit) {
  float data[4] = {1, 2, 3, 4}, bias[2] = {1, 1};
  return htp_allreduce_sum_bias_residual_f32(ctx, data, bias, NULL, data,
                                             htp_ctx_rank(ctx) == culprit ? 0 : 2, 2);
}
static htp_result bad_root(htp_ctx *ctx, int culprit) {
  char data[8] = "abcdefg";
  return htp_broadcast(ctx, data, sizeof data, htp_ctx_rank(ctx) == culprit ? 9 : 0);
}
/* The first rank past the end: the range is [0, size). */
static htp_result bad_root_at_size(htp_ctx *ctx, int culprit) {
  char data[8] = "abcdefg";
  return htp_broadcast(ctx, data, sizeof data,
                       htp_ctx_rank(ctx) == culprit ? htp_ctx_size(ctx) : 0);
}
static htp_result bad_negative_root(htp_ctx *ctx, int culprit) {
  char data[8] = "abcdefg";
  return htp_broadcast(ctx, data, sizeof data, htp_ctx_rank(ctx) == culprit ? -1 : 0);
}
static htp_result bad_root_mismatch(htp_ctx *ctx, int culprit) {
  char data[8] = "abcdefg";
  return htp_broadcast(ctx, data, sizeof data, htp_ctx_rank(ctx) == culprit ? 1 : 0);
}
static htp_result bad_gather_null(htp_ctx *ctx, int culprit) {
  char send[4] = "abc", recv[64];
  return htp_allgather(ctx, send, htp_ctx_rank(ctx) == culprit ? NULL : recv, sizeof send);
}
/* Overlaps the documented exceptions (in place) do not cover. */
static htp_result bad_reduce_overlap(htp_ctx *ctx, int culprit) {
  float data[9] = {0};
  const int shifted = htp_ctx_rank(ctx) == culprit;
  return htp_allreduce_sum_f32(ctx, data, data + shifted, 8);
}
static htp_result bad_gather_overlap(htp_ctx *ctx, int culprit) {
  char recv[16] = {0};
  /* in place is recv + rank * 4: the culprit's send straddles slots */
  const char *send = recv + 4 * htp_ctx_rank(ctx) + (htp_ctx_rank(ctx) == culprit ? 2 : 0);
  return htp_allgather(ctx, send, recv, 4);
}
static htp_result bad_copy_overlap(htp_ctx *ctx, int culprit) {
  float data[9] = {0};
  if (htp_ctx_rank(ctx) == culprit) {
    RANK_CALL(htp_op_copy(ctx, data, data, sizeof data)); /* the same buffer: nothing to do */
    return htp_op_copy(ctx, data + 1, data, 8 * sizeof(float));
  }
  return htp_barrier(ctx);
}
static htp_result bad_send_self(htp_ctx *ctx, int culprit) {
  char data[4] = "abc";
  if (htp_ctx_rank(ctx) == culprit) return htp_send(ctx, data, sizeof data, culprit, 0);
  return htp_barrier(ctx);
}
static htp_result bad_send_out_of_range(htp_ctx *ctx, int culprit) {
  char data[4] = "abc";
  if (htp_ctx_rank(ctx) == culprit) return htp_send(ctx, data, sizeof data, 3, 0);
  return htp_barrier(ctx);
}
static htp_result bad_recv_negative_peer(htp_ctx *ctx, int culprit) {
  char data[4] = "abc";
  if (htp_ctx_rank(ctx) == culprit) return htp_recv(ctx, data, sizeof data, -1, 0);
  return htp_barrier(ctx);
}
static htp_result bad_negative_tag(htp_ctx *ctx, int culprit) {
  char data[4] = "abc";
  if (htp_ctx_rank(ctx) == culprit) return htp_recv(ctx, data, sizeof data, 1 - culprit, -5);
  return htp_barrier(ctx);
}
static htp_result bad_size_mismatch(htp_ctx *ctx, int culprit) {
  char data[8] = "abcdefg";
  if (htp_ctx_rank(ctx) == culprit) return htp_recv(ctx, data, 4, 1 - culprit, 0);
  return htp_send(ctx, data, sizeof data, culprit, 0);
}

static htp_result body_bad(htp_ctx *ctx, void *user) {
  const bad_case *bad = user;
  double start = htp_now();
  htp_result rc = bad->call(ctx, bad->culprit);
  if (htp_now() - start > 1.0) {
    fprintf(stderr, "%s: rank %d waited for the deadline\n", bad->name, htp_ctx_rank(ctx));
    return HTP_ERR_INTERNAL;
  }
  if (rc == HTP_OK) return rc;
  /* Later calls fail fast with the same verdict. */
  htp_result again = htp_barrier(ctx);
  if (again != rc && !(rc == HTP_ERR_INVALID && again == HTP_ERR_INVALID)) {
    fprintf(stderr, "%s: rank %d: %s then %s\n", bad->name, htp_ctx_rank(ctx),
            htp_strerror(rc), htp_strerror(again));
    return HTP_ERR_INTERNAL;
  }
  return rc;
}

static void test_bad_arguments(void **state) {
  (void)state;
  const bad_case cases[] = {
      {"null send", bad_null_send, 1, "NULL", HTP_ERR_REMOTE},
      {"count mismatch", bad_count_mismatch, 1, "count mismatch", HTP_ERR_INVALID},
      {"op mismatch", bad_op_mismatch, 0, "mismatch", HTP_ERR_INVALID},
      {"f32/bf16 mismatch", bad_dtype_mismatch, 1, "htp_allreduce_sum_bf16", HTP_ERR_INVALID},
      {"plain meets bias all-reduce", bad_epilogue_mismatch, 1, "collective mismatch",
       HTP_ERR_INVALID},
      {"row length mismatch", bad_row_mismatch, 1, "row length mismatch", HTP_ERR_INVALID},
      {"residual on one rank only", bad_residual_missing, 1,
       "rank 0 passed {a bias, a residual}; rank 1 {a bias}: every rank passes the same",
       HTP_ERR_INVALID},
      {"bias on one rank only", bad_norm_bias_missing, 1,
       "rank 0 passed {a bias, a norm weight, a norm bias}; rank 1 {a norm weight, a norm bias}",
       HTP_ERR_INVALID},
      {"epsilon mismatch", bad_epsilon_mismatch, 1,
       "htp_allreduce_sum_norm_f32: epsilon mismatch: rank 0 passed 1e-05, rank 1 passed 1e+06",
       HTP_ERR_INVALID},
      {"group norm epsilon mismatch", bad_group_epsilon_mismatch, 1,
       "htp_group_layer_norm_f32: epsilon mismatch", HTP_ERR_INVALID},
      {"residual overlaps recv", bad_residual_overlap, 0, "residual", HTP_ERR_REMOTE},
      {"bias overlaps recv", bad_bias_overlap, 1, "bias", HTP_ERR_REMOTE},
      {"normed overlaps recv", bad_normed_overlap, 0, "normed", HTP_ERR_REMOTE},
      {"norm epsilon 0", bad_norm_epsilon, 1, "epsilon 0 must be positive", HTP_ERR_REMOTE},
      {"norm epsilon inf", bad_norm_epsilon_inf, 1,
       "htp_allreduce_sum_norm_f32: epsilon inf must be positive and finite", HTP_ERR_REMOTE},
      {"zero rows", bad_epilogue_rows, 1, "rows 0 and cols 2 must be >= 1", HTP_ERR_REMOTE},
      {"group norm meets a summed norm", bad_group_norm_mismatch, 1,
       "rank 0 called htp_group_layer_norm_f32, rank 1 called htp_allreduce_sum_norm_f32",
       HTP_ERR_INVALID},
      {"root out of range", bad_root, 0, "root 9 is out of range", HTP_ERR_REMOTE},
      {"root at world size", bad_root_at_size, 1, "root 2 is out of range", HTP_ERR_REMOTE},
      {"negative root", bad_negative_root, 1, "root -1", HTP_ERR_REMOTE},
      {"root mismatch", bad_root_mismatch, 1, "root mismatch", HTP_ERR_INVALID},
      {"allgather null recv", bad_gather_null, 0, "NULL", HTP_ERR_REMOTE},
      {"allreduce overlap", bad_reduce_overlap, 1, "overlap without being equal",
       HTP_ERR_REMOTE},
      {"allgather overlap", bad_gather_overlap, 0, "without being this rank's slot",
       HTP_ERR_REMOTE},
      {"copy overlap", bad_copy_overlap, 1, "overlap (32 bytes)", HTP_ERR_REMOTE},
      {"send to self", bad_send_self, 1, "calling rank itself", HTP_ERR_REMOTE},
      {"send out of range", bad_send_out_of_range, 0, "peer 3 is out of range",
       HTP_ERR_REMOTE},
      {"recv negative peer", bad_recv_negative_peer, 1, "peer -1", HTP_ERR_REMOTE},
      {"negative tag", bad_negative_tag, 0, "tag -5", HTP_ERR_REMOTE},
      {"send/recv size mismatch", bad_size_mismatch, 0, "sent 8 bytes", HTP_ERR_INVALID},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; ++c) {
    const bad_case *bad = &cases[c];
    htp_world *world = make_world(2, 2.0);
    rank_run runs[MAX_RANKS];
    run_ranks(world, body_bad, (void *)bad, runs);
    for (int rank = 0; rank < 2; ++rank) {
      htp_result expected = rank == bad->culprit ? HTP_ERR_INVALID : bad->others_expected;
      if (runs[rank].result != expected)
        fail_msg("%s: rank %d got %s (%s), expected %s", bad->name, rank,
                 htp_strerror(runs[rank].result), runs[rank].message, htp_strerror(expected));
    }
    if (!strstr(runs[bad->culprit].message, bad->needle))
      fail_msg("%s: message \"%s\" lacks \"%s\"", bad->name, runs[bad->culprit].message,
               bad->needle);
    assert_int_not_equal(htp_world_status(world), HTP_OK);
    htp_world_destroy(world);
  }
}

/* ===== 4. Faults and deadlines ========================================== */

enum { FAULT_ITERATIONS = 6 };
static const double SHORT_DEADLINE = 0.5;

/* An iteration: fault point, then an all-reduce of (rank + 1). */
static htp_result body_iterations(htp_ctx *ctx, void *user) {
  (void)user;
  int size = htp_ctx_size(ctx);
  float value[3];
  for (int64_t iteration = 0; iteration < FAULT_ITERATIONS; ++iteration) {
    RANK_CALL(htp_fault_point(ctx, iteration));
    for (int i = 0; i < 3; ++i) value[i] = (float)(htp_ctx_rank(ctx) + 1);
    RANK_CALL(htp_allreduce_sum_f32(ctx, value, value, 3));
    RANK_CHECK(ctx, value[2] == (float)(size * (size + 1) / 2));
  }
  return HTP_OK;
}

static void test_fault_hang_times_out(void **state) {
  (void)state;
  htp_world *world = make_world(3, SHORT_DEADLINE);
  htp_fault hang = {HTP_FAULT_HANG, 1, 2, 0};
  assert_int_equal(htp_world_add_fault(world, &hang), HTP_OK);
  rank_run runs[MAX_RANKS];
  double start = htp_now();
  run_ranks(world, body_iterations, NULL, runs);
  double elapsed = htp_now() - start;
  expect_result(&runs[0], HTP_ERR_TIMEOUT);
  expect_result(&runs[2], HTP_ERR_TIMEOUT);
  expect_result(&runs[1], HTP_ERR_REMOTE); /* released by the failure */
  assert_non_null(strstr(runs[0].message, "waited"));
  assert_non_null(strstr(runs[1].message, "hung"));
  /* Within the deadline (plus scheduling slack), not at the hang's cap. */
  if (elapsed > SHORT_DEADLINE + 2.0) fail_msg("took %.3f s", elapsed);
  assert_int_equal(htp_world_status(world), HTP_ERR_TIMEOUT);
  htp_world_destroy(world);
}

static void test_fault_die_is_remote(void **state) {
  (void)state;
  htp_world *world = make_world(4, 5.0); /* long: a dead rank must not need it */
  htp_fault die = {HTP_FAULT_DIE, 2, 3, 0};
  assert_int_equal(htp_world_add_fault(world, &die), HTP_OK);
  rank_run runs[MAX_RANKS];
  double start = htp_now();
  run_ranks(world, body_iterations, NULL, runs);
  double elapsed = htp_now() - start;
  for (int rank = 0; rank < 4; ++rank) expect_result(&runs[rank], HTP_ERR_REMOTE);
  assert_non_null(strstr(runs[2].message, "died at iteration 3"));
  assert_non_null(strstr(runs[0].message, "rank 2 aborted"));
  if (elapsed > 2.0) fail_msg("took %.3f s", elapsed);
  htp_world_destroy(world);
}

static void test_fault_delay(void **state) {
  (void)state;
  htp_world *world = make_world(2, 5.0);
  htp_fault delay = {HTP_FAULT_DELAY, 0, 4, 0.05};
  assert_int_equal(htp_world_add_fault(world, &delay), HTP_OK);
  rank_run runs[MAX_RANKS];
  run_ranks(world, body_iterations, NULL, runs);
  expect_all_ok(runs, 2);
  /* Iterations 4 and 5 are delayed: both ranks wait for rank 0. */
  assert_true(runs[1].seconds >= 0.09);
  htp_world_destroy(world);
}

/* A delay longer than the deadline is a straggler too slow to wait for. */
static void test_fault_long_delay_times_out(void **state) {
  (void)state;
  htp_world *world = make_world(2, SHORT_DEADLINE);
  htp_fault delay = {HTP_FAULT_DELAY, 1, 1, 3.0};
  assert_int_equal(htp_world_add_fault(world, &delay), HTP_OK);
  rank_run runs[MAX_RANKS];
  double start = htp_now();
  run_ranks(world, body_iterations, NULL, runs);
  expect_result(&runs[0], HTP_ERR_TIMEOUT);
  expect_result(&runs[1], HTP_ERR_TIMEOUT); /* its delay ended with the failure */
  if (htp_now() - start > SHORT_DEADLINE + 2.0) fail_msg("took %.3f s", htp_now() - start);
  htp_world_destroy(world);
}

/* Send and recv time out too; a hung rank is released by htp_abort from
 * another thread. */
static htp_result body_recv_from_hung(htp_ctx *ctx, void *user) {
  (void)user;
  char data[16];
  if (htp_ctx_rank(ctx) == 1) return htp_fault_point(ctx, 0);
  return htp_recv(ctx, data, sizeof data, 1, 7);
}

static htp_result body_send_to_hung(htp_ctx *ctx, void *user) {
  (void)user;
  char data[16] = "payload";
  if (htp_ctx_rank(ctx) == 1) return htp_fault_point(ctx, 0);
  return htp_send(ctx, data, sizeof data, 1, 7);
}

static void test_transfer_timeouts(void **state) {
  (void)state;
  rank_body bodies[2] = {body_recv_from_hung, body_send_to_hung};
  for (int b = 0; b < 2; ++b) {
    htp_world *world = make_world(2, SHORT_DEADLINE);
    htp_fault hang = {HTP_FAULT_HANG, 1, 0, 0};
    assert_int_equal(htp_world_add_fault(world, &hang), HTP_OK);
    rank_run runs[MAX_RANKS];
    run_ranks(world, bodies[b], NULL, runs);
    expect_result(&runs[0], HTP_ERR_TIMEOUT);
    expect_result(&runs[1], HTP_ERR_REMOTE);
    assert_true(runs[0].seconds >= SHORT_DEADLINE * 0.9);
    assert_true(runs[0].seconds < SHORT_DEADLINE + 2.0);
    htp_world_destroy(world);
  }
}

/* A recv matches the tag as well as the peer: rank 1 waits for tag 2 while
 * rank 0 sends tag 1, so both end at the deadline (whichever fails the
 * world first) and rank 1's buffer never gets the tag-1 bytes. */
static htp_result body_recv_other_tag(htp_ctx *ctx, void *user) {
  (void)user;
  char data[16] = {0};
  if (htp_ctx_rank(ctx) == 0) {
    snprintf(data, sizeof data, "tag one");
    return htp_send(ctx, data, sizeof data, 1, 1);
  }
  htp_result rc = htp_recv(ctx, data, sizeof data, 0, 2);
  RANK_CHECK(ctx, data[0] == 0);
  return rc;
}

static void test_recv_matches_tag(void **state) {
  (void)state;
  htp_world *world = make_world(2, SHORT_DEADLINE);
  rank_run runs[MAX_RANKS];
  run_ranks(world, body_recv_other_tag, NULL, runs);
  for (int rank = 0; rank < 2; ++rank) {
    if (runs[rank].result != HTP_ERR_TIMEOUT && runs[rank].result != HTP_ERR_REMOTE)
      fail_msg("rank %d: got %s (%s), expected a timeout", rank,
               htp_strerror(runs[rank].result), runs[rank].message);
    assert_true(runs[rank].seconds < SHORT_DEADLINE + 2.0);
  }
  assert_int_equal(htp_world_status(world), HTP_ERR_TIMEOUT);
  htp_world_destroy(world);
}

/* A rank's thread that waits: in a hung fault point, or in a barrier. */
typedef struct abort_job {
  htp_world *world;
  htp_ctx *ctx;
  htp_result result;
  double seconds;
  int in_barrier;
} abort_job;

static void *hang_thread(void *argument) {
  abort_job *job = argument;
  double start = htp_now();
  job->result = job->in_barrier ? htp_barrier(job->ctx) : htp_fault_point(job->ctx, 5);
  job->seconds = htp_now() - start;
  return NULL;
}

static void test_abort_releases_hang(void **state) {
  (void)state;
  htp_world *world = make_world(2, 30.0); /* the hang would last 300 s */
  htp_fault hang = {HTP_FAULT_HANG, 0, 0, 0};
  assert_int_equal(htp_world_add_fault(world, &hang), HTP_OK);
  abort_job job = {world, NULL, HTP_ERR_INTERNAL, 0, 0};
  htp_ctx *other = NULL;
  assert_int_equal(htp_ctx_create(world, 0, &job.ctx), HTP_OK);
  assert_int_equal(htp_ctx_create(world, 1, &other), HTP_OK);
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, hang_thread, &job), 0);
  struct timespec pause = {0, 100 * 1000 * 1000};
  nanosleep(&pause, NULL);
  htp_abort(other, HTP_ERR_SYSTEM);
  htp_abort(other, HTP_ERR_TIMEOUT); /* twice: the first failure wins */
  pthread_join(thread, NULL);
  assert_int_equal(job.result, HTP_ERR_REMOTE);
  assert_true(job.seconds < 5.0);
  /* The aborting rank sees its own reason; the other one REMOTE. */
  assert_int_equal(htp_barrier(other), HTP_ERR_SYSTEM);
  assert_int_equal(htp_barrier(job.ctx), HTP_ERR_REMOTE);
  assert_non_null(strstr(htp_last_error(job.ctx), "rank 1 aborted"));
  assert_int_equal(htp_world_status(world), HTP_ERR_SYSTEM);
  htp_ctx_destroy(job.ctx);
  htp_ctx_destroy(other);
  htp_world_destroy(world);
}

/* A hang with a cap and no peer to notice it fails the world by itself. */
static void test_hang_cap(void **state) {
  (void)state;
  htp_world *world = make_world(1, 5.0);
  htp_fault hang = {HTP_FAULT_HANG, 0, 1, 0.2};
  assert_int_equal(htp_world_add_fault(world, &hang), HTP_OK);
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  assert_int_equal(htp_fault_point(ctx, 0), HTP_OK);
  double start = htp_now();
  assert_int_equal(htp_fault_point(ctx, 1), HTP_ERR_TIMEOUT);
  assert_true(htp_now() - start >= 0.19);
  assert_int_equal(htp_barrier(ctx), HTP_ERR_TIMEOUT);
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
}

static void test_fault_errors(void **state) {
  (void)state;
  htp_world *world = make_world(2, 1.0);
  const htp_fault bad[] = {
      {HTP_FAULT_NONE, 0, 0, 0},   {(htp_fault_kind)9, 0, 0, 0}, {HTP_FAULT_HANG, 2, 0, 0},
      {HTP_FAULT_DIE, -1, 0, 0},   {HTP_FAULT_DIE, 0, -1, 0},    {HTP_FAULT_DELAY, 0, 0, 0},
      {HTP_FAULT_DELAY, 0, 0, -1},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
    assert_int_equal(htp_world_add_fault(world, &bad[i]), HTP_ERR_INVALID);
    assert_non_null(strstr(htp_world_last_error(world), "htp_world_add_fault"));
  }
  assert_int_equal(htp_world_add_fault(world, NULL), HTP_ERR_INVALID);
  assert_int_equal(htp_world_add_fault(NULL, &bad[0]), HTP_ERR_INVALID);
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  assert_int_equal(htp_fault_point(ctx, -1), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "negative"));
  assert_int_equal(htp_fault_point(ctx, 0), HTP_OK); /* no fault registered */
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
}

/* The all-reduce's chunks: equal without SM counts (whole cache lines, the
 * last short, as always), in proportion to the SMs where ranks partition
 * the GPU (an H200 rank on 8 SMs beside three on 24 summed a quarter), a
 * rank on the whole GPU counting as an equal share of the SMs left (--sms
 * 0:8 alone at tp 4 summed a quarter too), equal when the device's SMs are
 * unknown; they tile [0, count). */
static void test_allreduce_chunks(void **state) {
  (void)state;
  const int32_t sms[4] = {8, 24, 24, 24}, whole[4] = {8, 0, 24, 24}, alone[4] = {8, 0, 0, 0};
  for (size_t count = 0; count < 3000; count += 7)
    for (int variant = 0; variant < 6; ++variant) {
      const int32_t *counts = variant == 0 ? NULL : variant == 1 ? sms : variant < 4 ? whole : alone;
      const int device_sms = variant % 2 ? 132 : 0;
      size_t at = 0;
      for (int r = 0; r < 4; ++r) {
        size_t begin, end;
        htp__allreduce_chunk(count, 4, counts, device_sms, r, 32, &begin, &end);
        if (begin >= end) continue;
        assert_int_equal(begin, at);
        assert_int_equal(begin % 32, 0);
        at = end;
      }
      assert_int_equal(at, count);
    }
  size_t begin, end;
  htp__allreduce_chunk(1000, 4, NULL, 132, 1, 32, &begin, &end);
  assert_int_equal(begin, 256); /* ceil(1000 / 4) = 250, a whole line: 256 */
  assert_int_equal(end, 512);
  const size_t block = (size_t)64 * 197 * 768; /* ViT-B/16's output, batch 64 */
  htp__allreduce_chunk(block, 4, sms, 0, 0, 32, &begin, &end);
  assert_int_equal(begin, 0);
  assert_true(end > block / 10 - 32 && end <= block / 10 + 32); /* 8 of 80 SMs */
  /* 8, then 132 - 56 = 76 SMs for the rank on the whole GPU, 24, 24. */
  htp__allreduce_chunk(block, 4, whole, 132, 0, 32, &begin, &end);
  assert_true(end > block * 8 / 132 - 32 && end <= block * 8 / 132 + 32);
  htp__allreduce_chunk(block, 4, whole, 132, 1, 32, &begin, &end);
  assert_true(end - begin > block * 76 / 132 - 64 && end - begin <= block * 76 / 132 + 64);
  /* 8 beside three ranks sharing the other 124 (41 each). */
  htp__allreduce_chunk(block, 4, alone, 132, 0, 32, &begin, &end);
  assert_true(end > block * 8 / 131 - 32 && end <= block * 8 / 131 + 32);
  htp__allreduce_chunk(block, 4, whole, 0, 0, 32, &begin, &end);
  assert_int_equal(end, block / 4);
  /* Partitions holding the whole device leave nothing to share: equal. */
  const int32_t full[3] = {64, 64, 0};
  htp__allreduce_chunk(3000, 3, full, 128, 0, 32, &begin, &end);
  assert_int_equal(end, 1024);
  /* Counts given but every one 0 (each rank on the whole GPU): no
   * proportion, the equal chunks of no counts (not thirds of 132 SMs,
   * which end rank 1's at 2016). */
  const int32_t none[3] = {0, 0, 0};
  htp__allreduce_chunk(3000, 3, none, 132, 1, 32, &begin, &end);
  assert_int_equal(begin, 1024);
  assert_int_equal(end, 2048);
  /* Exactly one SM left for the one rank on the whole GPU: it weighs 1,
   * a proportion still (the partitions' halves), not equal thirds. */
  const int32_t one_left[3] = {64, 63, 0};
  htp__allreduce_chunk(12800, 3, one_left, 128, 0, 32, &begin, &end);
  assert_int_equal(end, 6400);
  htp__allreduce_chunk(12800, 3, one_left, 128, 2, 32, &begin, &end);
  assert_int_equal(begin, 12704); /* 12700, on a whole line */
  assert_int_equal(end, 12800);
}

/* A world of size ranks on the checked device (sm_counts may be NULL). */
static htp_world *make_checked_world(int size, const int32_t *sm_counts) {
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.world_size = size;
  config.timeout_s = 10.0;
  config.device = HTP_DEVICE_CHECKED;
  config.sm_counts = sm_counts;
  htp_world *world = NULL;
  char message[256];
  if (htp_world_create_verbose(&config, &world, message, sizeof message) != HTP_OK)
    fail_msg("htp_world_create: %s", message);
  return world;
}

/* The device's SM count reaches the chunking (htp__allreduce_chunk alone
 * is tested above). Each rank adds its own copy of the bias to the rows it
 * sums; here every rank's bias differs (rank r's is 1000 (r + 1)) and the
 * parts are zeros, so each row of the sum names the rank that summed it.
 * On the checked device's 132 SMs, rank 0 on 8, rank 2 on 24 and rank 1 on
 * the whole GPU (the other 100) sum rows [0, 8), [8, 108), [108, 132);
 * with the device's count unknown they would sum equal thirds of 44. */
enum { SMS_ROWS = 132, SMS_COLS = 32 };

static htp_result body_rows_by_sms(htp_ctx *ctx, void *user) {
  (void)user;
  const int rank = htp_ctx_rank(ctx);
  const size_t n = (size_t)SMS_ROWS * SMS_COLS;
  float *zeros = calloc(n, sizeof *zeros), *sum = malloc(n * sizeof *sum), bias[SMS_COLS];
  for (int c = 0; c < SMS_COLS; ++c) bias[c] = 1000.0f * (float)(rank + 1);
  void *dsend = zeros ? on_ctx(ctx, zeros, n * sizeof *zeros, 1) : NULL;
  void *dbias = on_ctx(ctx, bias, sizeof bias, 1), *dsum = NULL;
  htp_result rc = sum && dsend && dbias ? htp_mem_alloc(ctx, n * sizeof *sum, &dsum) : HTP_ERR_NOMEM;
  if (rc == HTP_OK)
    rc = htp_allreduce_sum_bias_residual_f32(ctx, dsend, dbias, NULL, dsum, SMS_ROWS, SMS_COLS);
  if (rc == HTP_OK) rc = htp_mem_download(ctx, sum, dsum, n * sizeof *sum);
  for (int row = 0; rc == HTP_OK && row < SMS_ROWS; ++row) {
    const int summer = row < 8 ? 0 : row < 108 ? 1 : 2;
    if (sum[(size_t)row * SMS_COLS] != 1000.0f * (float)(summer + 1)) {
      fprintf(stderr, "rank %d: row %d was summed by rank %g, not %d\n", rank, row,
              sum[(size_t)row * SMS_COLS] / 1000.0f - 1, summer);
      rc = HTP_ERR_INTERNAL;
    }
  }
  void *held[] = {dsend, dbias, dsum};
  for (size_t i = 0; i < sizeof held / sizeof *held; ++i)
    if (held[i]) htp_mem_free(ctx, held[i]);
  free(zeros), free(sum);
  return rc;
}

static void test_allreduce_rows_follow_device_sms(void **state) {
  (void)state;
  const int32_t sms[3] = {8, 0, 24};
  htp_world *world = make_checked_world(3, sms);
  rank_run runs[MAX_RANKS];
  run_ranks(world, body_rows_by_sms, NULL, runs);
  expect_all_ok(runs, 3);
  htp_world_destroy(world);
}

/* A rank failing mid all-reduce has copies queued that write its peers'
 * buffers; it waits for them before failing the world, since a peer woken
 * by the failure may reuse its buffers at once. Rank 1 queues the copy of
 * its rows into rank 0's sum, then fails copying its normed rows into rank
 * 0's normed, which holds only rank 0's own rows. Rank 0, woken, rewrites
 * its sum; rank 1 then frees memory (which runs every stream's queue, as
 * cudaFree waits for the device): rank 0's sum must keep what it wrote. */
enum { FAIL_ROWS = 8, FAIL_COLS = 32 };
static pthread_barrier_t fail_barrier;

static htp_result body_failure_settles_copies(htp_ctx *ctx, void *user) {
  (void)user;
  const int rank = htp_ctx_rank(ctx);
  const size_t n = (size_t)FAIL_ROWS * FAIL_COLS, bytes = n * sizeof(float);
  float ones[FAIL_ROWS * FAIL_COLS], sevens[FAIL_ROWS * FAIL_COLS], got[FAIL_ROWS * FAIL_COLS];
  float gamma[FAIL_COLS], beta[FAIL_COLS];
  for (size_t i = 0; i < n; ++i) ones[i] = 1.0f, sevens[i] = 7.0f;
  for (int c = 0; c < FAIL_COLS; ++c) gamma[c] = 1.0f, beta[c] = 0.0f;
  void *send = on_ctx(ctx, ones, bytes, 1), *g = on_ctx(ctx, gamma, sizeof gamma, 1);
  void *b = on_ctx(ctx, beta, sizeof beta, 1), *sum = NULL, *normed = NULL;
  int ok = send && g && b && htp_mem_alloc(ctx, bytes, &sum) == HTP_OK &&
           htp_mem_alloc(ctx, rank == 0 ? bytes / 2 : bytes, &normed) == HTP_OK;
  const htp_result rc =
      ok ? htp_allreduce_sum_norm_f32(ctx, send, NULL, NULL, sum, g, b, normed, FAIL_ROWS,
                                      FAIL_COLS, 1e-5f)
         : HTP_ERR_NOMEM;
  const char *why = htp_last_error(ctx);
  if (rank == 1 && (rc != HTP_ERR_INVALID || !strstr(why, "checked copy"))) {
    fprintf(stderr, "rank 1: got %s (%s), expected its copy refused\n", htp_strerror(rc), why);
    ok = 0;
  }
  if (rank == 0 && rc != HTP_ERR_REMOTE) {
    fprintf(stderr, "rank 0: got %s (%s), expected rank 1's failure\n", htp_strerror(rc), why);
    ok = 0;
  }
  if (rank == 0 && ok) ok = htp_mem_upload(ctx, sum, sevens, bytes) == HTP_OK;
  pthread_barrier_wait(&fail_barrier); /* rank 0 has reused its sum */
  if (rank == 1 && send) htp_mem_free(ctx, send), send = NULL;
  pthread_barrier_wait(&fail_barrier); /* every queue has run */
  if (rank == 0 && ok) ok = htp_mem_download(ctx, got, sum, bytes) == HTP_OK;
  for (size_t i = 0; rank == 0 && ok && i < n; ++i)
    if (got[i] != 7.0f) {
      fprintf(stderr, "rank 0: its sum's element %zu is %g: rank 1's copy landed after rank 0 "
              "was told of its failure\n", i, got[i]);
      ok = 0;
    }
  void *held[] = {send, g, b, sum, normed};
  for (size_t i = 0; i < sizeof held / sizeof *held; ++i)
    if (held[i]) htp_mem_free(ctx, held[i]);
  return ok ? HTP_OK : HTP_ERR_INTERNAL;
}

static void test_failure_settles_queued_copies(void **state) {
  (void)state;
  htp_world *world = make_checked_world(2, NULL);
  assert_int_equal(pthread_barrier_init(&fail_barrier, NULL, 2), 0);
  rank_run runs[MAX_RANKS];
  run_ranks(world, body_failure_settles_copies, NULL, runs);
  pthread_barrier_destroy(&fail_barrier);
  expect_all_ok(runs, 2);
  htp_world_destroy(world);
}

/* A rank whose context fails past the argument checks (here the checked
 * device refusing its environment) fails the world: a peer already in a
 * barrier hears it at once, not at the 30 s deadline (on an H200 a rank
 * refused its SMs left three peers waiting in their first collective). */
static void test_failed_context_fails_world(void **state) {
  (void)state;
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.backend = HTP_BACKEND_LOCAL;
  config.device = HTP_DEVICE_CHECKED;
  config.world_size = 2;
  config.timeout_s = 30.0;
  htp_world *world = NULL;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  unsetenv("HTP_CHECKED_LATENCY_US");
  abort_job job = {world, NULL, HTP_ERR_INTERNAL, 0, 1};
  assert_int_equal(htp_ctx_create(world, 1, &job.ctx), HTP_OK);
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, hang_thread, &job), 0);
  struct timespec pause = {0, 50 * 1000 * 1000};
  nanosleep(&pause, NULL);
  setenv("HTP_CHECKED_LATENCY_US", "not a number", 1);
  htp_ctx *refused = NULL;
  assert_int_not_equal(htp_ctx_create(world, 0, &refused), HTP_OK);
  unsetenv("HTP_CHECKED_LATENCY_US");
  assert_null(refused);
  assert_non_null(strstr(htp_world_last_error(world), "HTP_CHECKED_LATENCY_US"));
  pthread_join(thread, NULL);
  assert_int_equal(job.result, HTP_ERR_REMOTE);
  assert_true(job.seconds < 5.0);
  assert_non_null(strstr(htp_last_error(job.ctx), "rank 0 could not create its context"));
  htp_ctx_destroy(job.ctx);
  htp_world_destroy(world);
}

/* A rank that never creates its context: the others time out. */
static void test_missing_rank_times_out(void **state) {
  (void)state;
  htp_world *world = make_world(2, 0.3);
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  double start = htp_now();
  assert_int_equal(htp_barrier(ctx), HTP_ERR_TIMEOUT);
  double elapsed = htp_now() - start;
  assert_true(elapsed >= 0.29 && elapsed < 1.5);
  assert_non_null(strstr(htp_last_error(ctx), "waited"));
  start = htp_now();
  assert_int_equal(htp_barrier(ctx), HTP_ERR_TIMEOUT); /* fails fast now */
  assert_true(htp_now() - start < 0.1);
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
}

/* htp_world_shrink is MPI's (ULFM): a local world's threads cannot die
 * alone, so it says so and makes nothing; bad arguments are refused. So
 * are the standby calls. */
static void test_shrink_unsupported(void **state) {
  (void)state;
  assert_int_equal(htp_backend_can_shrink(HTP_BACKEND_LOCAL), 0);
  htp_world *world = make_world(2, 1.0), *survivors = (htp_world *)1;
  int32_t lost[2];
  int num_lost = -1;
  assert_int_equal(htp_world_shrink(world, &survivors, lost, 2, &num_lost), HTP_ERR_UNSUPPORTED);
  assert_null(survivors);
  assert_int_equal(num_lost, 0);
  assert_non_null(strstr(htp_world_last_error(world), "threads of this process"));
  assert_int_equal(htp_world_shrink(world, NULL, lost, 2, &num_lost), HTP_ERR_INVALID);
  assert_int_equal(htp_world_shrink(world, &survivors, NULL, 2, &num_lost), HTP_ERR_INVALID);
  assert_int_equal(htp_world_shrink(NULL, &survivors, lost, 2, &num_lost), HTP_ERR_INVALID);
  /* Standbys are the mpi backend's too: said, naming this world's backend. */
  assert_int_equal(htp_world_is_standby(world), 0);
  assert_int_equal(htp_world_is_standby(NULL), 0);
  htp_world *other = (htp_world *)1;
  assert_int_equal(htp_world_standby_wait(world, &other), HTP_ERR_UNSUPPORTED);
  assert_non_null(strstr(htp_world_last_error(world), "mpi backend's (this world is local's)"));
  assert_int_equal(htp_world_grow(world, 0, &other), HTP_ERR_UNSUPPORTED);
  assert_int_equal(htp_world_release_standbys(world), HTP_ERR_UNSUPPORTED);
  assert_int_equal(htp_world_standby_wait(NULL, &other), HTP_ERR_INVALID);
  assert_int_equal(htp_world_grow(NULL, 0, &other), HTP_ERR_INVALID);
  assert_int_equal(htp_world_release_standbys(NULL), HTP_ERR_INVALID);
  htp_world_destroy(world);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strerror),
      cmocka_unit_test(test_config_errors),
      cmocka_unit_test(test_ctx_errors),
      cmocka_unit_test(test_profile),
      cmocka_unit_test(test_world_error_per_thread),
      cmocka_unit_test(test_allreduce_closed_form),
      cmocka_unit_test(test_allreduce_reproducible),
      cmocka_unit_test(test_allreduce_bf16),
      cmocka_unit_test(test_allgather),
      cmocka_unit_test(test_broadcast_and_barrier),
      cmocka_unit_test(test_send_recv_ring),
      cmocka_unit_test(test_concurrent_worlds),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_fault_hang_times_out),
      cmocka_unit_test(test_fault_die_is_remote),
      cmocka_unit_test(test_fault_delay),
      cmocka_unit_test(test_fault_long_delay_times_out),
      cmocka_unit_test(test_transfer_timeouts),
      cmocka_unit_test(test_recv_matches_tag),
      cmocka_unit_test(test_abort_releases_hang),
      cmocka_unit_test(test_hang_cap),
      cmocka_unit_test(test_fault_errors),
      cmocka_unit_test(test_missing_rank_times_out),
      cmocka_unit_test(test_failed_context_fails_world),
      cmocka_unit_test(test_allreduce_chunks),
      cmocka_unit_test(test_allreduce_rows_follow_device_sms),
      cmocka_unit_test(test_failure_settles_queued_copies),
      cmocka_unit_test(test_allreduce_bias_residual),
      cmocka_unit_test(test_group_layer_norm),
      cmocka_unit_test(test_group_layer_norm_refusals),
      cmocka_unit_test(test_shrink_unsupported),
  };
  return cmocka_run_group_tests_name("runtime.local", tests, NULL, NULL);
}
