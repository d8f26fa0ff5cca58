/*===- test/runtime/nccl_test.c - the nccl backend (needs a GPU) -----------===*
 *
 * Skips (exit 77, ctest SKIP_RETURN_CODE) where no CUDA device is found, as
 * on the build machines. Ranks are threads, one per device (up to 4; one
 * device gives a world of one). Buffers are device memory; results are
 * copied back and checked against closed forms, transfers with memcmp.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "runtime/htp.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

enum { SKIP = 77, MAX_RANKS = 4, COUNT = 1 << 20 };

typedef struct rank_run {
  htp_world *world;
  int rank;
  htp_result result;
  char message[256];
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

static void run_world(htp_world *world, rank_run *runs, int hang_test) {
  int size = htp_world_size(world);
  pthread_t threads[MAX_RANKS];
  for (int rank = 0; rank < size; ++rank) {
    runs[rank] = (rank_run){world, rank, HTP_ERR_INTERNAL, "", hang_test};
    assert_int_equal(pthread_create(&threads[rank], NULL, rank_thread, &runs[rank]), 0);
  }
  for (int rank = 0; rank < size; ++rank) pthread_join(threads[rank], NULL);
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

int main(void) {
  if (device_count() < 1) {
    printf("no CUDA device: skipping the nccl tests\n");
    return SKIP;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_hang),
  };
  return cmocka_run_group_tests_name("runtime.nccl", tests, NULL, NULL);
}
