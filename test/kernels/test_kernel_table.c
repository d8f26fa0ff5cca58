/*===- test/kernels/test_kernel_table.c - The kernel tables and op entries -===*
 *
 * The CPU kernel table (kernels/htp_kernel_table.h) computes exactly what the
 * htp_cpu_* kernels compute when called by name (bitwise: the table only
 * forwards); the runtime's op entry points (htp_op_*, runtime/htp.h) give
 * the same through a context's table and through a NULL context, refuse bad
 * arguments with a message, and a world asking for the CUDA table either
 * gets it or fails cleanly; device memory and timing through a CPU context.
 * With CUDA built: the CUDA table's entries fail
 * (never crash) on an environment without a device, the unit kernels'
 * included (their twins are compared by kernels.cuda). Nothing here needs a GPU; on a machine
 * with one the entries are not run on host pointers.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "test_data.h"

#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels.h"
#include "runtime/htp.h"

enum { ROWS = 6, IN = 5, OUT = 7, BATCH = 2, TOKENS = 3, HEADS = 2, HEAD_DIM = 3, DIM = 5 };

static void assert_same(const float *a, const float *b, int64_t n) {
  assert_memory_equal(a, b, (size_t)n * sizeof(float));
}

/* 1. Every CPU table entry equals its kernel called by name. */
static void cpu_table_matches_kernels(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  assert_string_equal(t->name, "cpu");
  assert_int_equal(t->device, HTP_KERNEL_DEVICE_CPU);
  char error[128];
  htp_kernel_env env;
  htp_kernel_env_init(&env, error, sizeof error);
  assert_int_equal(env.device, -1);

  float *x = random_floats(ROWS * IN, -1, 1), *w = random_floats(OUT * IN, -1, 1);
  float *b = random_floats(OUT, -1, 1), *gamma = random_floats(IN, 0.5f, 1.5f);
  float *want = calloc(ROWS * OUT, sizeof(float)), *got = calloc(ROWS * OUT, sizeof(float));
  assert_non_null(want);
  assert_non_null(got);

  htp_cpu_linear_f32(x, w, b, want, ROWS, IN, OUT);
  assert_int_equal(t->linear_f32(&env, x, w, b, got, ROWS, IN, OUT), HTP_KERNEL_OK);
  assert_same(want, got, ROWS * OUT);

  htp_cpu_layer_norm_f32(x, gamma, w, want, ROWS, IN, 1e-5f);
  assert_int_equal(t->layer_norm_f32(&env, x, gamma, w, got, ROWS, IN, 1e-5f), HTP_KERNEL_OK);
  assert_same(want, got, ROWS * IN);

  for (int32_t tanh_approx = 0; tanh_approx <= 1; ++tanh_approx) {
    htp_cpu_gelu_f32(x, want, ROWS * IN, tanh_approx);
    assert_int_equal(t->gelu_f32(&env, x, got, ROWS * IN, tanh_approx), HTP_KERNEL_OK);
    assert_same(want, got, ROWS * IN);
  }

  htp_cpu_add_f32(x, w, want, ROWS * IN);
  assert_int_equal(t->add_f32(&env, x, w, got, ROWS * IN), HTP_KERNEL_OK);
  assert_same(want, got, ROWS * IN);

  htp_cpu_bias_add_f32(x, gamma, want, ROWS, IN);
  assert_int_equal(t->bias_add_f32(&env, x, gamma, got, ROWS, IN), HTP_KERNEL_OK);
  assert_same(want, got, ROWS * IN);

  assert_int_equal(t->copy(&env, got, x, ROWS * IN * sizeof(float)), HTP_KERNEL_OK);
  assert_same(x, got, ROWS * IN);
  assert_string_equal(error, "");
  free(x), free(w), free(b), free(gamma), free(want), free(got);
}

/* 2. Attention and the three unit kernels of the balance hooks. */
static void cpu_table_matches_attention_and_units(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  char error[128];
  htp_kernel_env env;
  htp_kernel_env_init(&env, error, sizeof error);
  const int64_t rows = BATCH * TOKENS, inner = HEADS * HEAD_DIM;
  float *x = random_floats(rows * DIM, -1, 1), *wqkv = random_floats(3 * inner * DIM, -1, 1);
  float *bqkv = random_floats(3 * inner, -1, 1), *wproj = random_floats(DIM * inner, -1, 1);
  float *bproj = random_floats(DIM, -1, 1);
  const int64_t floats = t->attention_scratch_floats(BATCH, TOKENS, DIM, HEADS, HEAD_DIM);
  assert_int_equal(floats, htp_cpu_attention_scratch_floats(BATCH, TOKENS, DIM, HEADS, HEAD_DIM));
  float *scratch = calloc((size_t)floats, sizeof(float));
  float *want = calloc(rows * DIM, sizeof(float)), *got = calloc(rows * DIM, sizeof(float));
  assert_non_null(scratch);

  htp_cpu_attention_f32(x, wqkv, bqkv, wproj, bproj, want, scratch, BATCH, TOKENS, DIM, HEADS,
                        HEAD_DIM);
  assert_int_equal(t->attention_f32(&env, x, wqkv, bqkv, wproj, bproj, got, scratch, floats,
                                    BATCH, TOKENS, DIM, HEADS, HEAD_DIM),
                   HTP_KERNEL_OK);
  assert_same(want, got, rows * DIM);
  /* Too little scratch is refused, not overrun. */
  assert_int_equal(t->attention_f32(&env, x, wqkv, bqkv, wproj, bproj, got, scratch, floats - 1,
                                    BATCH, TOKENS, DIM, HEADS, HEAD_DIM),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "scratch"));

  /* Listed heads, listed MLP units, row-parallel over unit blocks. */
  const int32_t heads[] = {1};
  float *context_want = calloc(rows * inner, sizeof(float));
  float *context_got = calloc(rows * inner, sizeof(float));
  htp_cpu_attention_heads_f32(x, wqkv, bqkv, context_want, scratch, BATCH, TOKENS, DIM, HEADS,
                              HEAD_DIM, heads, 1);
  assert_int_equal(t->attention_heads_f32(&env, x, wqkv, bqkv, context_got, scratch, BATCH,
                                          TOKENS, DIM, HEADS, HEAD_DIM, heads, 1),
                   HTP_KERNEL_OK);
  assert_same(context_want, context_got, rows * inner);

  const int32_t units[] = {2, 0};
  const int64_t width = 2, hidden_dim = 3 * width;
  float *w1 = random_floats(hidden_dim * DIM, -1, 1), *b1 = random_floats(hidden_dim, -1, 1);
  float *hidden_want = calloc(rows * hidden_dim, sizeof(float));
  float *hidden_got = calloc(rows * hidden_dim, sizeof(float));
  htp_cpu_mlp_hidden_units_f32(x, w1, b1, hidden_want, rows, DIM, hidden_dim, width, units, 2, 0);
  assert_int_equal(t->mlp_hidden_units_f32(&env, x, w1, b1, hidden_got, rows, DIM, hidden_dim,
                                           width, units, 2, 0),
                   HTP_KERNEL_OK);
  assert_same(hidden_want, hidden_got, rows * hidden_dim);

  float *w2 = random_floats(DIM * hidden_dim, -1, 1);
  htp_cpu_linear_units_f32(hidden_want, w2, want, rows, hidden_dim, DIM, width, units, 2, 0);
  assert_int_equal(t->linear_units_f32(&env, hidden_want, w2, got, rows, hidden_dim, DIM, width,
                                       units, 2, 0),
                   HTP_KERNEL_OK);
  assert_same(want, got, rows * DIM);
  free(x), free(wqkv), free(bqkv), free(wproj), free(bproj), free(scratch), free(want);
  free(got), free(context_want), free(context_got), free(w1), free(b1), free(hidden_want);
  free(hidden_got), free(w2);
}

/* 3. The op entry points: a context's (CPU) table and a NULL context give
 * the kernel's result; bad arguments are refused with a message. */
static void op_entries_dispatch(void **state) {
  (void)state;
  htp_config config = HTP_CONFIG_INITIALIZER;
  assert_int_equal(config.device, HTP_DEVICE_CPU);
  htp_world *world = NULL;
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  float *x = random_floats(ROWS * IN, -1, 1), *w = random_floats(OUT * IN, -1, 1);
  float *want = calloc(ROWS * OUT, sizeof(float)), *got = calloc(ROWS * OUT, sizeof(float));
  htp_cpu_linear_f32(x, w, NULL, want, ROWS, IN, OUT);
  assert_int_equal(htp_op_linear_f32(ctx, x, w, NULL, got, ROWS, IN, OUT), HTP_OK);
  assert_same(want, got, ROWS * OUT);
  memset(got, 0, ROWS * OUT * sizeof(float));
  assert_int_equal(htp_op_linear_f32(NULL, x, w, NULL, got, ROWS, IN, OUT), HTP_OK);
  assert_same(want, got, ROWS * OUT);
  assert_int_equal(htp_op_copy(NULL, got, x, 0), HTP_OK);
  assert_int_equal(htp_op_copy(ctx, got, x, 3 * sizeof(float)), HTP_OK);
  assert_same(x, got, 3);

  /* Refusals: NULL ctx has no message; with ctx the message names the op. */
  assert_int_equal(htp_op_gelu_f32(NULL, x, NULL, 4, 0), HTP_ERR_INVALID);
  assert_int_equal(htp_op_add_f32(ctx, x, w, got, 0), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "htp_op_add_f32"));
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);

  /* Too little attention scratch, reported through the table. */
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  float scratch[4];
  assert_int_equal(htp_op_attention_f32(ctx, x, w, NULL, w, NULL, got, scratch, 4, 1, 2, 2, 1, 1),
                   HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "htp_op_attention_f32: cpu attention: scratch"));
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);

  config.device = (htp_device)7;
  assert_int_equal(htp_world_create(&config, &world), HTP_ERR_INVALID);
  free(x), free(w), free(want), free(got);
}

/* 3b. Device memory and timing through a CPU context: a round trip through
 * alloc, upload, download; marks a sleep apart; refusals. */
static void memory_and_timing(void **state) {
  (void)state;
  htp_config config = HTP_CONFIG_INITIALIZER;
  htp_world *world = NULL;
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  float host[100], back[100];
  for (int i = 0; i < 100; i++) host[i] = (float)i * 0.5f;
  void *device = NULL;
  assert_int_equal(htp_mem_alloc(ctx, sizeof host, &device), HTP_OK);
  assert_non_null(device);
  assert_int_equal((uintptr_t)device % 64, 0);
  assert_int_equal(htp_mem_upload(ctx, device, host, sizeof host), HTP_OK);
  assert_int_equal(htp_op_gelu_f32(ctx, device, device, 100, 0), HTP_OK);
  assert_int_equal(htp_mem_download(ctx, back, device, sizeof back), HTP_OK);
  float want[100];
  htp_cpu_gelu_f32(host, want, 100, 0);
  assert_same(want, back, 100);
  assert_int_equal(htp_ctx_synchronize(ctx), HTP_OK);
  assert_int_equal(htp_mem_free(ctx, device), HTP_OK);
  assert_int_equal(htp_mem_free(ctx, NULL), HTP_OK);

  double seconds = -1.0;
  assert_int_equal(htp_ctx_mark(ctx, 0), HTP_OK);
  struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, NULL);
  assert_int_equal(htp_ctx_mark(ctx, 1), HTP_OK);
  assert_int_equal(htp_ctx_elapsed(ctx, &seconds), HTP_OK);
  assert_true(seconds >= 0.019 && seconds < 5.0);

  /* Refusals, each with a message naming the call. */
  assert_int_equal(htp_mem_alloc(ctx, 0, &device), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "htp_mem_alloc"));
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  assert_int_equal(htp_mem_upload(ctx, NULL, host, 4), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "htp_mem_upload"));
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  assert_int_equal(htp_ctx_mark(ctx, 2), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "mark 2"));
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
  /* No context: no environment object, so no marks. */
  assert_int_equal(htp_ctx_elapsed(NULL, &seconds), HTP_ERR_INVALID);
  char error[128];
  htp_kernel_env bare;
  htp_kernel_env_init(&bare, error, sizeof error);
  assert_int_equal(htp_cpu_kernel_table()->mark(&bare, 0), HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "htp_cpu_kernel_env_create"));
}

/* 4. A world asking for the CUDA table: unsupported without CUDA; with CUDA
 * and no GPU the context fails with a message instead of crashing. */
static void cuda_device_selection(void **state) {
  (void)state;
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.device = HTP_DEVICE_CUDA;
  htp_world *world = NULL;
  char message[256];
  htp_result r = htp_world_create_verbose(&config, &world, message, sizeof message);
#ifndef HTP_HAVE_CUDA
  assert_int_equal(r, HTP_ERR_UNSUPPORTED);
  assert_non_null(strstr(message, "CUDA"));
#else
  assert_int_equal(r, HTP_OK);
  htp_ctx *ctx = NULL;
  r = htp_ctx_create(world, 0, &ctx);
  if (r == HTP_OK) { /* a GPU: the context holds the CUDA table */
    assert_int_equal(htp_ctx_device(ctx) >= -1, 1);
    htp_ctx_destroy(ctx);
  } else {
    assert_int_equal(r, HTP_ERR_SYSTEM);
    assert_null(ctx);
    assert_non_null(strstr(htp_world_last_error(world), "cuda"));
  }
  htp_world_destroy(world);
#endif
}

#ifdef HTP_HAVE_CUDA
/* 5. The CUDA table without a device: every entry fails, none crashes. */
static void cuda_table_without_device(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cuda_kernel_table();
  assert_string_equal(t->name, "cuda");
  char error[256];
  htp_kernel_env env;
  htp_kernel_status created = htp_cuda_kernel_env_create(0, &env, error, sizeof error);
  float x[8] = {0}, y[8] = {0};
  const int32_t unit = 0;
  if (created != HTP_KERNEL_OK) { /* no GPU here: the environment has no device */
    assert_int_equal(created, HTP_KERNEL_ERR_SYSTEM);
    assert_true(strlen(error) > 0);
    assert_int_equal(t->linear_f32(&env, x, x, NULL, y, 2, 2, 2), HTP_KERNEL_ERR_SYSTEM);
    assert_non_null(strstr(error, "no CUDA device"));
    assert_int_equal(t->gelu_f32(&env, x, y, 8, 0), HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->copy(&env, y, x, sizeof x), HTP_KERNEL_ERR_SYSTEM);
    /* The unit kernels have CUDA twins (kernels/cuda/units.cu, compared with
     * the CPU's by kernels.cuda on a GPU); without a device they fail too. */
    assert_int_equal(t->linear_units_f32(&env, x, x, y, 2, 2, 2, 1, &unit, 1, 0),
                     HTP_KERNEL_ERR_SYSTEM);
    assert_non_null(strstr(error, "no CUDA device"));
    assert_int_equal(t->attention_heads_f32(&env, x, x, x, y, y, 1, 1, 1, 1, 1, &unit, 1),
                     HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->mlp_hidden_units_f32(&env, x, x, x, y, 1, 1, 1, 1, &unit, 1, 0),
                     HTP_KERNEL_ERR_SYSTEM);
  }
  /* NULL environment: an error, not a crash. */
  assert_int_equal(t->add_f32(NULL, x, x, y, 8), HTP_KERNEL_ERR_SYSTEM);
  assert_int_equal(t->linear_units_f32(NULL, x, x, y, 2, 2, 2, 1, &unit, 1, 0),
                   HTP_KERNEL_ERR_SYSTEM);
  htp_cuda_kernel_env_destroy(&env);
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpu_table_matches_kernels),
      cmocka_unit_test(cpu_table_matches_attention_and_units),
      cmocka_unit_test(op_entries_dispatch),
      cmocka_unit_test(memory_and_timing),
      cmocka_unit_test(cuda_device_selection),
#ifdef HTP_HAVE_CUDA
      cmocka_unit_test(cuda_table_without_device),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
