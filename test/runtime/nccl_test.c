/*===- test/runtime/nccl_test.c - the nccl backend (needs a GPU) -----------===*
 *
 * The placement rules (which GPU a rank drives, two ranks on one GPU) are
 * plain functions and run everywhere first. The rest skips (exit 77, ctest
 * SKIP_RETURN_CODE) where no CUDA device is found, as on the build
 * machines, unless HTP_REQUIRE_GPU is set: then a missing or unusable
 * device fails (exit 1), as the CUDA kernel tests' do (cuda_test.h
 * no_device_exit, shared). Ranks are threads, one per device (up to 4; one device gives a
 * world of one). Buffers are device memory; results are copied back and
 * checked against closed forms, transfers with memcmp. With the CUDA kernel
 * table, a kernel and the all-reduce after it share the nccl stream (no
 * synchronisation between them in the test); on a one-GPU machine a world
 * of two ranks is refused with a message.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "runtime/comm_internal.h" /* htp__nccl_local_index, htp__nccl_shared_gpu */
#include "runtime/htp.h"
#include "runtime/htp_ops.h"
#include "test/kernels/cuda_test.h" /* no_device_exit */

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

enum { MAX_RANKS = 4, COUNT = 1 << 20 };

typedef struct rank_run {
  htp_world *world;
  int rank;
  htp_result result;
  char message[512];
  int hang_test;
} rank_run;

#define CHECK(call)                                                                            \
  do {                                                                                         \
    htp_result rc_ = (call);                                                                   \
    if (rc_ != HTP_OK) {                                                                       \
      snprintf(run->message, sizeof run->message, "%s: %s", #call, htp_last_error(ctx));      \
      run->result = rc_;                                                                       \
      goto done;                                                                               \
    }                                                                                          \
  } while (0)

static void *rank_thread(void *argument) {
  rank_run *run = argument;
  htp_ctx *ctx = NULL;
  float *device = NULL, *host = NULL;
  run->result = htp_ctx_create(run->world, run->rank, &ctx);
  if (run->result != HTP_OK) {
    snprintf(run->message, sizeof run->message, "%s", htp_world_last_error(run->world));
    return NULL;
  }
  int size = htp_ctx_size(ctx);
  host = malloc(COUNT * sizeof(float) * MAX_RANKS);
  if (cudaMalloc((void **)&device, COUNT * sizeof(float) * MAX_RANKS) != cudaSuccess || !host) {
    run->result = HTP_ERR_NOMEM;
    goto done;
  }
  if (run->hang_test) {
    CHECK(htp_fault_point(ctx, 0));
    float one = 1;
    cudaMemcpy(device, &one, sizeof one, cudaMemcpyHostToDevice);
    CHECK(htp_allreduce_sum_f32(ctx, device, device, 1));
    run->result = HTP_OK;
    goto done;
  }
  for (size_t i = 0; i < COUNT; ++i) host[i] = (float)((run->rank + 1) * (int)(i % 3 + 1));
  cudaMemcpy(device, host, COUNT * sizeof(float), cudaMemcpyHostToDevice);
  CHECK(htp_allreduce_sum_f32(ctx, device, device, COUNT));
  cudaMemcpy(host, device, COUNT * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < COUNT; ++i)
    if (host[i] != (float)(size * (size + 1) / 2 * (int)(i % 3 + 1))) {
      snprintf(run->message, sizeof run->message, "allreduce: [%zu] = %g", i, host[i]);
      run->result = HTP_ERR_INTERNAL;
      goto done;
    }
  /* allgather in place: rank r's block at r * bytes */
  for (size_t i = 0; i < 1000; ++i) host[i] = (float)(run->rank * 1000 + (int)i);
  cudaMemcpy(device + run->rank * 1000, host, 1000 * sizeof(float), cudaMemcpyHostToDevice);
  CHECK(htp_allgather(ctx, device + run->rank * 1000, device, 1000 * sizeof(float)));
  cudaMemcpy(host, device, (size_t)size * 1000 * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < (size_t)size * 1000; ++i)
    if (host[i] != (float)i) {
      snprintf(run->message, sizeof run->message, "allgather: [%zu] = %g", i, host[i]);
      run->result = HTP_ERR_INTERNAL;
      goto done;
    }
  for (int root = 0; root < size; ++root) {
    float value = run->rank == root ? 42.0f + (float)root : -1.0f;
    cudaMemcpy(device, &value, sizeof value, cudaMemcpyHostToDevice);
    CHECK(htp_broadcast(ctx, device, sizeof value, root));
    cudaMemcpy(&value, device, sizeof value, cudaMemcpyDeviceToHost);
    if (value != 42.0f + (float)root) {
      run->result = HTP_ERR_INTERNAL;
      snprintf(run->message, sizeof run->message, "broadcast from %d: %g", root, value);
      goto done;
    }
  }
  if (size >= 2 && run->rank < 2) {
    unsigned char bytes[4096], back[4096];
    for (size_t i = 0; i < sizeof bytes; ++i) bytes[i] = (unsigned char)(i * 7 + 1);
    if (run->rank == 0) {
      cudaMemcpy(device, bytes, sizeof bytes, cudaMemcpyHostToDevice);
      CHECK(htp_send(ctx, device, sizeof bytes, 1, 0));
    } else {
      CHECK(htp_recv(ctx, device, sizeof bytes, 0, 0));
      cudaMemcpy(back, device, sizeof back, cudaMemcpyDeviceToHost);
      if (memcmp(back, bytes, sizeof bytes) != 0) {
        run->result = HTP_ERR_INTERNAL;
        snprintf(run->message, sizeof run->message, "send/recv: bytes differ");
        goto done;
      }
    }
  }
  CHECK(htp_barrier(ctx));
  run->result = HTP_OK;
done:
  cudaFree(device);
  free(host);
  htp_ctx_destroy(ctx);
  return NULL;
}

static int device_count(void) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return 0;
  return devices;
}

static htp_world *make_world(int size, double timeout) {
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.backend = HTP_BACKEND_NCCL;
  config.world_size = size;
  config.timeout_s = timeout;
  htp_world *world = NULL;
  char message[256];
  htp_result rc = htp_world_create_verbose(&config, &world, message, sizeof message);
  if (rc != HTP_OK) fail_msg("htp_world_create: %s: %s", htp_strerror(rc), message);
  return world;
}

/* One thread per rank running body, joined. */
static void run_ranks(htp_world *world, rank_run *runs, int hang_test, void *(*body)(void *)) {
  int size = htp_world_size(world);
  pthread_t threads[MAX_RANKS];
  for (int rank = 0; rank < size; ++rank) {
    runs[rank] = (rank_run){world, rank, HTP_ERR_INTERNAL, "", hang_test};
    assert_int_equal(pthread_create(&threads[rank], NULL, body, &runs[rank]), 0);
  }
  for (int rank = 0; rank < size; ++rank) pthread_join(threads[rank], NULL);
}

static void run_world(htp_world *world, rank_run *runs, int hang_test) {
  run_ranks(world, runs, hang_test, rank_thread);
}

static void test_collectives(void **state) {
  (void)state;
  int size = device_count() < MAX_RANKS ? device_count() : MAX_RANKS;
  htp_world *world = make_world(size, 30.0);
  rank_run runs[MAX_RANKS];
  run_world(world, runs, 0);
  for (int rank = 0; rank < size; ++rank)
    if (runs[rank].result != HTP_OK)
      fail_msg("rank %d: %s: %s", rank, htp_strerror(runs[rank].result), runs[rank].message);
  htp_world_destroy(world);
}

/* Rank size-1 hangs before the all-reduce: the others time out. */
static void test_hang(void **state) {
  (void)state;
  int size = device_count() < MAX_RANKS ? device_count() : MAX_RANKS;
  if (size < 2) skip();
  htp_world *world = make_world(size, 1.0);
  htp_fault hang = {HTP_FAULT_HANG, size - 1, 0, 0};
  assert_int_equal(htp_world_add_fault(world, &hang), HTP_OK);
  rank_run runs[MAX_RANKS];
  run_world(world, runs, 1);
  for (int rank = 0; rank < size; ++rank) {
    htp_result expected = rank == size - 1 ? HTP_ERR_REMOTE : HTP_ERR_TIMEOUT;
    if (runs[rank].result != expected)
      fail_msg("rank %d: %s: %s", rank, htp_strerror(runs[rank].result), runs[rank].message);
  }
  htp_world_destroy(world);
}

/* ----- Placement (no GPU needed) ----------------------------------------- */

static void test_local_index(void **state) {
  (void)state;
  /* Two hosts, ranks interleaved: each rank's index among its host's. */
  const htp__nccl_place places[] = {{"a", "0000:01:00.0"}, {"b", "0000:01:00.0"},
                                    {"a", "0000:02:00.0"}, {"b", "0000:02:00.0"},
                                    {"a", "0000:03:00.0"}};
  const int expected[] = {0, 0, 1, 1, 2};
  for (int rank = 0; rank < 5; ++rank)
    assert_int_equal(htp__nccl_local_index(places, 5, rank), expected[rank]);
}

static void test_shared_gpu(void **state) {
  (void)state;
  /* The same bus id on two hosts is two GPUs; on one host, one. */
  const htp__nccl_place distinct[] = {{"a", "0000:01:00.0"}, {"b", "0000:01:00.0"},
                                      {"a", "0000:02:00.0"}};
  for (int rank = 0; rank < 3; ++rank) assert_int_equal(htp__nccl_shared_gpu(distinct, 3, rank), -1);
  const htp__nccl_place shared[] = {{"a", "0000:01:00.0"}, {"b", "0000:01:00.0"},
                                    {"a", "0000:01:00.0"}};
  assert_int_equal(htp__nccl_shared_gpu(shared, 3, 0), 2);
  assert_int_equal(htp__nccl_shared_gpu(shared, 3, 2), 0);
  assert_int_equal(htp__nccl_shared_gpu(shared, 3, 1), -1);
  /* One rank alone never shares (a one-rank run on a one-GPU machine). */
  assert_int_equal(htp__nccl_shared_gpu(shared, 1, 0), -1);
}

/* ----- With a GPU ---------------------------------------------------------- */

/* The CUDA kernel table on the nccl stream: an add enqueued by the table,
 * then the all-reduce of its result with no synchronisation between them;
 * one stream orders them, so every element is size * 2 * (rank-sum). */
static void *compute_then_reduce(void *argument) {
  rank_run *run = argument;
  htp_ctx *ctx = NULL;
  float *device = NULL, *host = NULL;
  enum { N = 1 << 18 };
  run->result = htp_ctx_create(run->world, run->rank, &ctx);
  if (run->result != HTP_OK) {
    snprintf(run->message, sizeof run->message, "%s", htp_world_last_error(run->world));
    return NULL;
  }
  const int size = htp_ctx_size(ctx);
  host = malloc(N * sizeof(float));
  if (!host || cudaMalloc((void **)&device, 2 * N * sizeof(float)) != cudaSuccess) {
    run->result = HTP_ERR_NOMEM;
    goto done;
  }
  for (int i = 0; i < N; ++i) host[i] = (float)((run->rank + 1) * (i % 5 + 1));
  CHECK(htp_mem_upload(ctx, device, host, N * sizeof(float)));
  CHECK(htp_op_add_f32(ctx, device, device, device + N, N));
  CHECK(htp_allreduce_sum_f32(ctx, device + N, device + N, N));
  CHECK(htp_mem_download(ctx, host, device + N, N * sizeof(float)));
  for (int i = 0; i < N; ++i)
    if (host[i] != (float)(size * (size + 1) * (i % 5 + 1))) {
      snprintf(run->message, sizeof run->message, "add then allreduce: [%d] = %g", i, host[i]);
      run->result = HTP_ERR_INTERNAL;
      goto done;
    }
  run->result = HTP_OK;
done:
  cudaFree(device);
  free(host);
  htp_ctx_destroy(ctx);
  return NULL;
}

static void test_kernels_on_the_nccl_stream(void **state) {
  (void)state;
  int size = device_count() < MAX_RANKS ? device_count() : MAX_RANKS;
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.backend = HTP_BACKEND_NCCL;
  config.device = HTP_DEVICE_CUDA;
  config.world_size = size;
  config.timeout_s = 30.0;
  htp_world *world = NULL;
  char message[256];
  htp_result rc = htp_world_create_verbose(&config, &world, message, sizeof message);
  if (rc != HTP_OK) fail_msg("htp_world_create: %s: %s", htp_strerror(rc), message);
  rank_run runs[MAX_RANKS];
  run_ranks(world, runs, 0, compute_then_reduce);
  for (int rank = 0; rank < size; ++rank)
    if (runs[rank].result != HTP_OK)
      fail_msg("rank %d: %s: %s", rank, htp_strerror(runs[rank].result), runs[rank].message);
  htp_world_destroy(world);
}

/* More ranks than GPUs: every rank is refused, with the same message,
 * instead of NCCL hanging or failing obscurely. */
static void *create_only(void *argument) {
  rank_run *run = argument;
  htp_ctx *ctx = NULL;
  run->result = htp_ctx_create(run->world, run->rank, &ctx);
  snprintf(run->message, sizeof run->message, "%s", htp_world_last_error(run->world));
  htp_ctx_destroy(ctx);
  return NULL;
}

static void test_two_ranks_one_gpu(void **state) {
  (void)state;
  const int size = device_count() + 1;
  if (size > MAX_RANKS) skip();
  htp_world *world = make_world(size, 10.0);
  rank_run runs[MAX_RANKS];
  run_ranks(world, runs, 0, create_only);
  /* The ranks sharing a GPU (device_count and 0) are refused; a rank on a
   * GPU of its own then fails in the NCCL setup or at its deadline. */
  assert_int_equal(runs[0].result, HTP_ERR_INVALID);
  assert_int_equal(runs[size - 1].result, HTP_ERR_INVALID);
  /* The world keeps one last message: with one GPU every rank's is the
   * refusal; with more, a rank that failed otherwise may have written last. */
  if (size == 2 && !strstr(runs[0].message, "one GPU per rank"))
    fail_msg("rank 0's refusal does not say why: %s", runs[0].message);
  printf("refused: %s\n", runs[0].message);
  htp_world_destroy(world);
}

int main(void) {
  const struct CMUnitTest placement[] = {
      cmocka_unit_test(test_local_index),
      cmocka_unit_test(test_shared_gpu),
  };
  int failed = cmocka_run_group_tests_name("runtime.nccl placement", placement, NULL, NULL);
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices < 1)
    return no_device_exit(probe != cudaSuccess ? cudaGetErrorString(probe) : "no device", failed);
  if (failed) return failed;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_kernels_on_the_nccl_stream),
      cmocka_unit_test(test_two_ranks_one_gpu),
      cmocka_unit_test(test_hang),
  };
  return cmocka_run_group_tests_name("runtime.nccl", tests, NULL, NULL);
}
