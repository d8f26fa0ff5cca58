/*===- test/kernels/test_kernel_table.c - The kernel tables and op entries -===*
 *
 * The CPU kernel table (kernels/htp_kernel_table.h) computes exactly what the
 * htp_cpu_* kernels compute when called by name (bitwise: the table only
 * forwards); the runtime's op entry points (htp_op_*, runtime/htp_ops.h) give
 * the same through a context's table and through a NULL context, refuse bad
 * arguments with a message, and a world asking for the CUDA table either
 * gets it or fails cleanly; device memory and timing through a CPU context.
 * The training op entries (issue 9) give the table's results with every
 * gradient written, not accumulated, patch embedding equals a stride-P
 * convolution, and each refuses its bad arguments with a message.
 * With CUDA built: the CUDA table's entries fail
 * (never crash) on an environment without a device, the unit kernels' and
 * the training entries included (their twins are compared by kernels.cuda
 * and kernels.train_cuda). Nothing here needs a GPU; on a machine
 * with one the entries are not run on host pointers.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>

#include <cmocka.h>

#include "test_data.h"

#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels.h"
#include "runtime/htp.h"
#include "runtime/htp_ops.h"

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

/* 3c. The training op entries compute what the table's entries compute,
 * with every gradient WRITTEN (the outputs start as garbage, the table's
 * accumulating kernels are called on zeros), and patch embedding equals a
 * stride-P convolution written here from its definition. */
static float *garbage(int64_t n) { return random_floats(n, 40, 50); }
static float *fzeros(int64_t n) {
  float *p = calloc((size_t)n, sizeof(float));
  assert_non_null(p);
  return p;
}

static void assert_near(const char *what, const float *got, const double *want, int64_t n,
                        double tol) {
  double err = 0.0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    err = fmax(err, fabs((double)got[i] - want[i]));
    scale = fmax(scale, fabs(want[i]));
  }
  if (!(err / scale <= tol)) fail_msg("%s: relative error %.3g > %.3g", what, err / scale, tol);
}

static void training_op_entries(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  char error[128];
  htp_kernel_env env;
  htp_kernel_env_init(&env, error, sizeof error);
  htp_config config = HTP_CONFIG_INITIALIZER;
  htp_world *world = NULL;
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);

  /* Patch embedding: B 2, C 3, 8 x 4 images, P 2 (a 4 x 2 grid), D 5. */
  enum { B = 2, C = 3, H = 8, W = 4, P = 2, D = 5, N = (H / P) * (W / P), K = C * P * P };
  float *images = random_floats(B * C * H * W, -1, 1), *pw = random_floats(D * K, -1, 1);
  float *pb = random_floats(D, -1, 1), *py = garbage(B * N * D), *scratch = garbage(B * N * K);
  assert_int_equal(htp_op_patch_embed_f32(ctx, images, pw, pb, py, scratch, B * N * K, B, C, H,
                                          W, P, D),
                   HTP_OK);
  double *conv = calloc(B * N * D, sizeof(double));
  double *cdw = calloc(D * K, sizeof(double)), *cdb = calloc(D, sizeof(double));
  float *pdy = random_floats(B * N * D, -1, 1);
  for (int b = 0; b < B; ++b)
    for (int gy = 0; gy < H / P; ++gy)
      for (int gx = 0; gx < W / P; ++gx)
        for (int d = 0; d < D; ++d) {
          const int tok = gy * (W / P) + gx;
          const double g = pdy[(b * N + tok) * D + d];
          double sum = pb[d];
          for (int c = 0; c < C; ++c)
            for (int ky = 0; ky < P; ++ky)
              for (int kx = 0; kx < P; ++kx) {
                const double pixel = images[((b * C + c) * H + gy * P + ky) * W + gx * P + kx];
                const int widx = ((d * C + c) * P + ky) * P + kx; /* w[d, c, ky, kx] */
                sum += (double)pw[widx] * pixel;
                cdw[widx] += g * pixel;
              }
          conv[(b * N + tok) * D + d] = sum;
          cdb[d] += g;
        }
  assert_near("patch embed vs convolution", py, conv, B * N * D, 1e-6);
  float *pdw = garbage(D * K), *pdb = garbage(D);
  assert_int_equal(htp_op_patch_embed_backward_f32(ctx, images, pdy, pdw, pdb, scratch,
                                                   B * N * K, B, C, H, W, P, D),
                   HTP_OK);
  assert_near("patch embed dw vs convolution", pdw, cdw, D * K, 1e-6);
  assert_near("patch embed db", pdb, cdb, D, 1e-6);

  /* Linear's adjoint, db wanted and not. */
  float *x = random_floats(ROWS * IN, -1, 1), *w = random_floats(OUT * IN, -1, 1);
  float *dy = random_floats(ROWS * OUT, -1, 1);
  float *dx = garbage(ROWS * IN), *dw = garbage(OUT * IN), *db = garbage(OUT);
  float *rdx = fzeros(ROWS * IN), *rdw = fzeros(OUT * IN), *rdb = fzeros(OUT);
  assert_int_equal(t->linear_backward_f32(&env, x, w, dy, rdx, rdw, rdb, ROWS, IN, OUT),
                   HTP_KERNEL_OK);
  assert_int_equal(htp_op_linear_backward_f32(ctx, x, w, dy, dx, dw, db, ROWS, IN, OUT), HTP_OK);
  assert_same(dx, rdx, ROWS * IN);
  assert_same(dw, rdw, OUT * IN);
  assert_same(db, rdb, OUT);
  float *dw2 = garbage(OUT * IN);
  assert_int_equal(htp_op_linear_backward_f32(NULL, x, w, dy, dx, dw2, NULL, ROWS, IN, OUT),
                   HTP_OK);
  assert_same(dw2, rdw, OUT * IN);

  /* Layer norm's adjoint (rows ROWS, dim IN). */
  float *gamma = random_floats(IN, 0.5f, 1.5f), *ldy = random_floats(ROWS * IN, -1, 1);
  float *ldx = garbage(ROWS * IN), *dg = garbage(IN), *dbt = garbage(IN);
  float *rldx = fzeros(ROWS * IN), *rdg = fzeros(IN), *rdbt = fzeros(IN);
  assert_int_equal(
      t->layer_norm_backward_f32(&env, x, gamma, ldy, rldx, rdg, rdbt, ROWS, IN, 1e-5f),
      HTP_KERNEL_OK);
  assert_int_equal(
      htp_op_layer_norm_backward_f32(ctx, x, gamma, ldy, ldx, dg, dbt, ROWS, IN, 1e-5f), HTP_OK);
  assert_same(ldx, rldx, ROWS * IN);
  assert_same(dg, rdg, IN);
  assert_same(dbt, rdbt, IN);

  /* GELU's adjoint, both forms. */
  for (int32_t tanh_approx = 0; tanh_approx <= 1; ++tanh_approx) {
    assert_int_equal(t->gelu_backward_f32(&env, x, ldy, rldx, ROWS * IN, tanh_approx),
                     HTP_KERNEL_OK);
    assert_int_equal(htp_op_gelu_backward_f32(ctx, x, ldy, ldx, ROWS * IN, tanh_approx), HTP_OK);
    assert_same(ldx, rldx, ROWS * IN);
  }

  /* Attention's adjoint, dbproj wanted and not; bproj is never an argument. */
  const int64_t rows = BATCH * TOKENS, inner = HEADS * HEAD_DIM;
  float *ax = random_floats(rows * DIM, -1, 1), *wqkv = random_floats(3 * inner * DIM, -1, 1);
  float *bqkv = random_floats(3 * inner, -1, 1), *wproj = random_floats(DIM * inner, -1, 1);
  float *ady = random_floats(rows * DIM, -1, 1);
  const int64_t floats =
      htp_cpu_attention_backward_scratch_floats(BATCH, TOKENS, DIM, HEADS, HEAD_DIM);
  float *ascratch = fzeros(floats);
  float *adx = garbage(rows * DIM), *dwqkv = garbage(3 * inner * DIM), *dbqkv = garbage(3 * inner);
  float *dwproj = garbage(DIM * inner), *dbproj = garbage(DIM);
  float *radx = fzeros(rows * DIM), *rdwqkv = fzeros(3 * inner * DIM), *rdbqkv = fzeros(3 * inner);
  float *rdwproj = fzeros(DIM * inner), *rdbproj = fzeros(DIM);
  assert_int_equal(t->attention_backward_f32(&env, ax, wqkv, bqkv, wproj, NULL, ady, radx,
                                             rdwqkv, rdbqkv, rdwproj, rdbproj, ascratch, floats,
                                             BATCH, TOKENS, DIM, HEADS, HEAD_DIM),
                   HTP_KERNEL_OK);
  assert_int_equal(htp_op_attention_backward_f32(ctx, ax, wqkv, bqkv, wproj, ady, adx, dwqkv,
                                                 dbqkv, dwproj, dbproj, ascratch, floats, BATCH,
                                                 TOKENS, DIM, HEADS, HEAD_DIM),
                   HTP_OK);
  assert_same(adx, radx, rows * DIM);
  assert_same(dwqkv, rdwqkv, 3 * inner * DIM);
  assert_same(dbqkv, rdbqkv, 3 * inner);
  assert_same(dwproj, rdwproj, DIM * inner);
  assert_same(dbproj, rdbproj, DIM);
  float *dwproj2 = garbage(DIM * inner);
  assert_int_equal(htp_op_attention_backward_f32(ctx, ax, wqkv, bqkv, wproj, ady, adx, dwqkv,
                                                 dbqkv, dwproj2, NULL, ascratch, floats, BATCH,
                                                 TOKENS, DIM, HEADS, HEAD_DIM),
                   HTP_OK);
  assert_same(dwproj2, rdwproj, DIM * inner);

  /* Tokens, pooling, row sums and the loss: the table's results. */
  enum { EN = 4 };
  float *patches = random_floats(BATCH * EN * DIM, -1, 1), *cls = random_floats(DIM, -1, 1);
  float *pos = random_floats((EN + 1) * DIM, -1, 1);
  float *tokens = garbage(BATCH * (EN + 1) * DIM), *rtokens = fzeros(BATCH * (EN + 1) * DIM);
  assert_int_equal(t->embed_tokens_f32(&env, patches, cls, pos, rtokens, BATCH, EN, DIM),
                   HTP_KERNEL_OK);
  assert_int_equal(htp_op_embed_tokens_f32(ctx, patches, cls, pos, tokens, BATCH, EN, DIM),
                   HTP_OK);
  assert_same(tokens, rtokens, BATCH * (EN + 1) * DIM);
  float *dpatches = garbage(BATCH * EN * DIM), *dcls = garbage(DIM);
  float *dpos = garbage((EN + 1) * DIM), *rdpatches = fzeros(BATCH * EN * DIM);
  float *rdcls = fzeros(DIM), *rdpos = fzeros((EN + 1) * DIM);
  assert_int_equal(t->embed_tokens_backward_f32(&env, tokens, rdpatches, rdcls, rdpos, BATCH,
                                                EN, DIM),
                   HTP_KERNEL_OK);
  assert_int_equal(htp_op_embed_tokens_backward_f32(ctx, tokens, dpatches, dcls, dpos, BATCH,
                                                    EN, DIM),
                   HTP_OK);
  assert_same(dpatches, rdpatches, BATCH * EN * DIM);
  assert_same(dcls, rdcls, DIM);
  assert_same(dpos, rdpos, (EN + 1) * DIM);
  float *pooled = garbage(BATCH * DIM), *rpooled = fzeros(BATCH * DIM);
  assert_int_equal(t->cls_token_f32(&env, tokens, rpooled, BATCH, EN + 1, DIM), HTP_KERNEL_OK);
  assert_int_equal(htp_op_cls_token_f32(ctx, tokens, pooled, BATCH, EN + 1, DIM), HTP_OK);
  assert_same(pooled, rpooled, BATCH * DIM);
  assert_int_equal(t->cls_token_backward_f32(&env, pooled, rtokens, BATCH, EN + 1, DIM),
                   HTP_KERNEL_OK);
  assert_int_equal(htp_op_cls_token_backward_f32(ctx, pooled, tokens, BATCH, EN + 1, DIM),
                   HTP_OK);
  assert_same(tokens, rtokens, BATCH * (EN + 1) * DIM);
  float *sums = garbage(DIM), *rsums = fzeros(DIM);
  assert_int_equal(t->row_sum_f32(&env, ax, rsums, rows, DIM), HTP_KERNEL_OK);
  assert_int_equal(htp_op_row_sum_f32(ctx, ax, sums, rows, DIM), HTP_OK);
  assert_same(sums, rsums, DIM);
  float *targets = fzeros(ROWS * OUT), *dlogits = garbage(ROWS * OUT);
  float *rdlogits = fzeros(ROWS * OUT), loss = -1.0f, rloss = -2.0f;
  for (int r = 0; r < ROWS; ++r) targets[r * OUT + (r * 3) % OUT] = 1.0f;
  assert_int_equal(t->softmax_cross_entropy_f32(&env, dy, targets, &rloss, rdlogits, ROWS, OUT),
                   HTP_KERNEL_OK);
  assert_int_equal(htp_op_cross_entropy_f32(ctx, dy, targets, &loss, ROWS, OUT), HTP_OK);
  assert_true(loss == rloss);
  assert_int_equal(htp_op_cross_entropy_backward_f32(ctx, dy, targets, dlogits, ROWS, OUT),
                   HTP_OK);
  assert_same(dlogits, rdlogits, ROWS * OUT);
  /* The optimizers: the op's step is the table's, bit for bit. */
  float *ow = garbage(DIM), *ow2 = fzeros(DIM), *om = fzeros(DIM), *om2 = fzeros(DIM);
  float *ov = fzeros(DIM), *ov2 = fzeros(DIM);
  memcpy(ow2, ow, DIM * sizeof *ow);
  for (int step = 1; step <= 3; ++step) {
    assert_int_equal(htp_op_adamw_f32(ctx, ow, sums, om, ov, DIM, 1e-2f, 0.9f, 0.999f, 1e-8f,
                                      0.05f, step), HTP_OK);
    assert_int_equal(t->adamw_f32(&env, ow2, sums, om2, ov2, DIM, 1e-2f, 0.9f, 0.999f, 1e-8f,
                                  0.05f, step), HTP_KERNEL_OK);
  }
  assert_same(ow, ow2, DIM);
  assert_same(ov, ov2, DIM);
  for (int step = 1; step <= 3; ++step) {
    assert_int_equal(htp_op_sgd_momentum_f32(ctx, ow, sums, om, DIM, 1e-2f, 0.9f, 0.0f, step),
                     HTP_OK);
    assert_int_equal(t->sgd_momentum_f32(&env, ow2, sums, om2, DIM, 1e-2f, 0.9f, 0.0f, step),
                     HTP_KERNEL_OK);
  }
  assert_same(ow, ow2, DIM);
  assert_same(om, om2, DIM);
  free(ow), free(ow2), free(om), free(om2), free(ov), free(ov2);
  assert_string_equal(htp_last_error(ctx), "");

  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
  free(images), free(pw), free(pb), free(py), free(scratch), free(conv), free(cdw), free(cdb);
  free(pdy), free(pdw), free(pdb), free(x), free(w), free(dy), free(dx), free(dw), free(db);
  free(rdx), free(rdw), free(rdb), free(dw2), free(gamma), free(ldy), free(ldx), free(dg);
  free(dbt), free(rldx), free(rdg), free(rdbt), free(ax), free(wqkv), free(bqkv), free(wproj);
  free(ady), free(ascratch), free(adx), free(dwqkv), free(dbqkv), free(dwproj), free(dbproj);
  free(radx), free(rdwqkv), free(rdbqkv), free(rdwproj), free(rdbproj), free(dwproj2);
  free(patches), free(cls), free(pos), free(tokens), free(rtokens), free(dpatches), free(dcls);
  free(dpos), free(rdpatches), free(rdcls), free(rdpos), free(pooled), free(rpooled);
  free(sums), free(rsums), free(targets), free(dlogits), free(rdlogits);
}

/* The fused residual ops on the CPU (no fused entry: the linear, then the
 * add): x·wᵀ + b + r against a double loop; r NULL or overlapping y refused
 * before y is written. */
static void residual_op_entries(void **state) {
  (void)state;
  htp_config config = HTP_CONFIG_INITIALIZER;
  htp_world *world = NULL;
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  float *x = random_floats(ROWS * IN, -1, 1), *w = random_floats(OUT * IN, -1, 1);
  float *b = random_floats(OUT, -1, 1), *r = random_floats(ROWS * OUT, -1, 1);
  float *got = calloc(ROWS * OUT, sizeof(float));
  double *want = calloc(ROWS * OUT, sizeof(double));
  assert_non_null(got);
  assert_non_null(want);
  for (int64_t i = 0; i < ROWS; ++i)
    for (int64_t o = 0; o < OUT; ++o) {
      double sum = (double)b[o] + r[i * OUT + o];
      for (int64_t k = 0; k < IN; ++k) sum += (double)x[i * IN + k] * w[o * IN + k];
      want[i * OUT + o] = sum;
    }
  assert_int_equal(htp_op_linear_residual_f32(ctx, x, w, b, r, got, ROWS, IN, OUT), HTP_OK);
  assert_near("linear_residual", got, want, ROWS * OUT, 1e-4);
  memset(got, 0, ROWS * OUT * sizeof(float));
  assert_int_equal(htp_op_linear_residual_f32(ctx, x, w, b, NULL, got, ROWS, IN, OUT),
                   HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "htp_op_linear_residual_f32: r is NULL"));
  /* r one element into y: the pair would write y before reading r. */
  float *both = calloc(ROWS * OUT + 1, sizeof(float));
  assert_non_null(both);
  assert_int_equal(htp_op_linear_residual_f32(ctx, x, w, b, both + 1, both, ROWS, IN, OUT),
                   HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "overlap"));
  for (int64_t i = 0; i <= ROWS * OUT; ++i) assert_true(both[i] == 0.0f);
  float scratch[4];
  assert_int_equal(htp_op_attention_residual_f32(ctx, x, w, NULL, w, NULL, both, both, scratch,
                                                 4, 1, 2, 2, 1, 1),
                   HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "htp_op_attention_residual_f32"));
  /* The bias add with a residual: x + b + r, the same refusals. */
  float *xo = random_floats(ROWS * OUT, -1, 1);
  for (int64_t i = 0; i < ROWS * OUT; ++i) want[i] = (double)xo[i] + b[i % OUT] + r[i];
  assert_int_equal(htp_op_bias_add_residual_f32(ctx, xo, b, r, got, ROWS, OUT), HTP_OK);
  assert_near("bias_add_residual", got, want, ROWS * OUT, 1e-6);
  assert_int_equal(htp_op_bias_add_residual_f32(ctx, xo, b, NULL, got, ROWS, OUT),
                   HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "htp_op_bias_add_residual_f32: r is NULL"));
  memset(both, 0, (ROWS * OUT + 1) * sizeof(float));
  assert_int_equal(htp_op_bias_add_residual_f32(ctx, xo, b, both + 1, both, ROWS, OUT),
                   HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "overlap"));
  for (int64_t i = 0; i <= ROWS * OUT; ++i) assert_true(both[i] == 0.0f);
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
  free(x), free(w), free(b), free(r), free(got), free(want), free(both), free(xo);
}

/* 3d. Each training op entry refuses bad arguments: HTP_ERR_INVALID with a
 * message naming the entry (and what is wrong), before writing anything;
 * without a context just the code. */
#define REFUSED(call, fragment)                                                                \
  do {                                                                                         \
    assert_int_equal((call), HTP_ERR_INVALID);                                                 \
    if (!strstr(htp_last_error(ctx), (fragment)))                                              \
      fail_msg("%s: message \"%s\" lacks \"%s\"", #call, htp_last_error(ctx), (fragment));     \
  } while (0)

static void training_op_entries_refuse(void **state) {
  (void)state;
  htp_config config = HTP_CONFIG_INITIALIZER;
  htp_world *world = NULL;
  htp_ctx *ctx = NULL;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  assert_int_equal(htp_ctx_create(world, 0, &ctx), HTP_OK);
  float a[64], o[64], s[64];
  for (int i = 0; i < 64; ++i) a[i] = o[i] = s[i] = 1.0f;
  const float *cf = a;
  const int64_t big = (int64_t)INT32_MAX + 1;

  /* patch_embed (and its backward share the checks): NULLs, sizes, a
   * patch that does not divide, too little scratch, BLAS's int. */
  REFUSED(htp_op_patch_embed_f32(ctx, NULL, cf, cf, o, s, 64, 1, 1, 4, 4, 2, 2),
          "htp_op_patch_embed_f32: images, w, b, y or scratch is NULL");
  REFUSED(htp_op_patch_embed_f32(ctx, cf, cf, NULL, o, s, 64, 1, 1, 4, 4, 2, 2), "is NULL");
  REFUSED(htp_op_patch_embed_f32(ctx, cf, cf, cf, o, s, 64, 1, 0, 4, 4, 2, 2), ">= 1");
  REFUSED(htp_op_patch_embed_f32(ctx, cf, cf, cf, o, s, 64, 1, 1, 4, 6, 4, 2), "multiples");
  REFUSED(htp_op_patch_embed_f32(ctx, cf, cf, cf, o, s, 15, 1, 1, 4, 4, 2, 2),
          "scratch holds 15 floats, the patches need 16");
  REFUSED(htp_op_patch_embed_f32(ctx, cf, cf, cf, o, s, 64, 1, 1, 1, 1, 1, big), "BLAS");
  REFUSED(htp_op_patch_embed_backward_f32(ctx, cf, cf, o, NULL, s, 64, 1, 1, 4, 4, 2, 2),
          "htp_op_patch_embed_backward_f32: images, dy, dw, db or scratch is NULL");
  REFUSED(htp_op_patch_embed_backward_f32(ctx, cf, cf, o, o, s, 64, 1, 1, 4, 3, 2, 2),
          "multiples");
  REFUSED(htp_op_patch_embed_backward_f32(ctx, cf, cf, o, o, s, 3, 1, 1, 4, 4, 2, 2),
          "scratch holds 3");

  REFUSED(htp_op_embed_tokens_f32(ctx, cf, NULL, cf, o, 1, 1, 1),
          "htp_op_embed_tokens_f32: patches, cls, pos or y is NULL");
  REFUSED(htp_op_embed_tokens_f32(ctx, cf, cf, cf, o, 1, 0, 1), ">= 1");
  REFUSED(htp_op_embed_tokens_f32(ctx, cf, cf, cf, o, INT64_MAX / 2, 3, 1), "fit");
  REFUSED(htp_op_embed_tokens_backward_f32(ctx, cf, o, o, NULL, 1, 1, 1),
          "htp_op_embed_tokens_backward_f32: dy, dpatches, dcls or dpos is NULL");
  REFUSED(htp_op_embed_tokens_backward_f32(ctx, cf, o, o, o, 0, 1, 1), ">= 1");
  REFUSED(htp_op_cls_token_f32(ctx, cf, NULL, 1, 1, 1), "htp_op_cls_token_f32: x or y is NULL");
  REFUSED(htp_op_cls_token_f32(ctx, cf, o, 1, 0, 1), ">= 1");
  REFUSED(htp_op_cls_token_backward_f32(ctx, NULL, o, 1, 1, 1),
          "htp_op_cls_token_backward_f32: dy or dx is NULL");
  REFUSED(htp_op_cls_token_backward_f32(ctx, cf, o, 1, 1, -1), ">= 1");
  REFUSED(htp_op_row_sum_f32(ctx, cf, NULL, 1, 1), "htp_op_row_sum_f32: x or y is NULL");
  REFUSED(htp_op_row_sum_f32(ctx, cf, o, 0, 1), ">= 1");

  REFUSED(htp_op_adamw_f32(ctx, o, cf, o, NULL, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1),
          "htp_op_adamw_f32: w, g, m or v is NULL");
  REFUSED(htp_op_adamw_f32(ctx, o, cf, o, o, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 0), ">= 1");
  REFUSED(htp_op_adamw_f32(ctx, o, cf, o, o, 1, NAN, 0.9f, 0.999f, 1e-8f, 0, 1), "finite");
  REFUSED(htp_op_adamw_f32(ctx, o, cf, o, o, 1, 1e-3f, 1.0f, 0.999f, 1e-8f, 0, 1), "[0, 1)");
  REFUSED(htp_op_adamw_f32(ctx, o, cf, o, o, 1, 1e-3f, 0.9f, 0.999f, 0, 0, 1), "epsilon");
  REFUSED(htp_op_sgd_momentum_f32(ctx, o, NULL, o, 1, 1e-3f, 0.9f, 0, 1),
          "htp_op_sgd_momentum_f32: w, g or m is NULL");
  REFUSED(htp_op_sgd_momentum_f32(ctx, o, cf, o, 1, 1e-3f, -1.0f, 0, 1), "momentum");
  REFUSED(htp_op_cross_entropy_f32(ctx, cf, cf, NULL, 1, 1),
          "htp_op_cross_entropy_f32: logits, targets or loss is NULL");
  REFUSED(htp_op_cross_entropy_f32(ctx, cf, cf, o, 1, 0), ">= 1");
  REFUSED(htp_op_cross_entropy_backward_f32(ctx, cf, NULL, o, 1, 1),
          "htp_op_cross_entropy_backward_f32: logits, targets or dlogits is NULL");
  REFUSED(htp_op_cross_entropy_backward_f32(ctx, cf, cf, o, INT64_MAX, 2), "fit");

  REFUSED(htp_op_linear_backward_f32(ctx, cf, cf, cf, NULL, o, o, 1, 1, 1),
          "htp_op_linear_backward_f32: x, w, dy, dx or dw is NULL");
  REFUSED(htp_op_linear_backward_f32(ctx, cf, cf, cf, o, o, NULL, big, 1, 1), "must be in [1,");
  REFUSED(htp_op_linear_backward_f32(ctx, cf, cf, cf, o, o, NULL, 1, 0, 1), "must be in [1,");
  REFUSED(htp_op_layer_norm_backward_f32(ctx, cf, cf, cf, o, o, NULL, 1, 1, 1e-5f),
          "htp_op_layer_norm_backward_f32: x, gamma, dy, dx, dgamma or dbeta is NULL");
  REFUSED(htp_op_layer_norm_backward_f32(ctx, cf, cf, cf, o, o, o, 1, 0, 1e-5f), ">= 1");
  REFUSED(htp_op_layer_norm_backward_f32(ctx, cf, cf, cf, o, o, o, 1, 1, -1.0f), "epsilon");
  /* epsilon 0 made a constant row NaN and +inf every output beta, with
   * HTP_OK: positive and finite, as the dialect's verifier asks. */
  REFUSED(htp_op_layer_norm_backward_f32(ctx, cf, cf, cf, o, o, o, 1, 1, 0.0f),
          "epsilon 0 must be positive and finite");
  REFUSED(htp_op_layer_norm_f32(ctx, cf, cf, cf, o, 1, 1, 0.0f),
          "htp_op_layer_norm_f32: epsilon 0 must be positive and finite");
  REFUSED(htp_op_layer_norm_f32(ctx, cf, cf, cf, o, 1, 1, INFINITY), "positive and finite");
  REFUSED(htp_op_layer_norm_f32(ctx, cf, cf, cf, o, 1, 1, NAN), "positive and finite");
  REFUSED(htp_op_gelu_backward_f32(ctx, cf, NULL, o, 1, 0), "htp_op_gelu_backward_f32: dy");
  REFUSED(htp_op_gelu_backward_f32(ctx, cf, cf, o, 0, 0), "n 0");
  REFUSED(htp_op_gelu_backward_f32(ctx, cf, cf, o, 1, 2), "tanh_approx 2");

  REFUSED(htp_op_attention_backward_f32(ctx, cf, cf, NULL, cf, cf, o, o, o, NULL, NULL, s, 64,
                                        1, 1, 1, 1, 1),
          "htp_op_attention_backward_f32: dy, dwqkv, dbqkv or dwproj is NULL");
  REFUSED(htp_op_attention_backward_f32(ctx, cf, cf, NULL, cf, cf, o, o, o, o, NULL, NULL, 64,
                                        1, 1, 1, 1, 1),
          "is NULL");
  REFUSED(htp_op_attention_backward_f32(ctx, cf, cf, NULL, cf, cf, o, o, o, o, NULL, s, 64, 1,
                                        0, 1, 1, 1),
          ">= 1");
  const int64_t need = htp_cpu_attention_backward_scratch_floats(1, 2, 2, 1, 1);
  o[0] = 7.0f; /* refused before any gradient is cleared */
  REFUSED(htp_op_attention_backward_f32(ctx, cf, cf, NULL, cf, cf, o, o, o, o, NULL, s,
                                        need - 1, 1, 2, 2, 1, 1),
          "the cpu kernel needs");
  assert_true(o[0] == 7.0f);
  REFUSED(htp_op_attention_backward_f32(ctx, cf, cf, NULL, cf, cf, o, o, o, o, NULL, s, 64, 1,
                                        1, big, 1, 1),
          "BLAS");

  /* Without a context: the code alone. */
  assert_int_equal(htp_op_row_sum_f32(NULL, cf, NULL, 1, 1), HTP_ERR_INVALID);
  assert_int_equal(htp_op_linear_backward_f32(NULL, cf, cf, cf, o, NULL, NULL, 1, 1, 1),
                   HTP_ERR_INVALID);
  htp_ctx_destroy(ctx);
  htp_world_destroy(world);
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
  /* Elapsed before both marks measured nothing: refused, not 0 or the
   * clock's reading since boot. */
  assert_int_equal(htp_ctx_elapsed(ctx, &seconds), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "needs mark 0 and mark 1"));
  assert_int_equal(htp_ctx_mark(ctx, 1), HTP_OK);
  assert_int_equal(htp_ctx_elapsed(ctx, &seconds), HTP_ERR_INVALID);
  assert_int_equal(htp_ctx_mark(ctx, 0), HTP_OK);
  assert_int_equal(htp_ctx_elapsed(ctx, &seconds), HTP_ERR_INVALID);
  assert_non_null(strstr(htp_last_error(ctx), "mark 1 was recorded before mark 0"));
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
  /* No context: memory is the CPU table's (host memory, as for the ops),
   * refusals come without a message; no environment object, so no marks. */
  assert_int_equal(htp_mem_alloc(NULL, sizeof host, &device), HTP_OK);
  assert_int_equal(htp_mem_upload(NULL, device, host, sizeof host), HTP_OK);
  assert_int_equal(htp_mem_download(NULL, back, device, sizeof back), HTP_OK);
  assert_same(host, back, 100);
  assert_int_equal(htp_ctx_synchronize(NULL), HTP_OK);
  assert_int_equal(htp_mem_free(NULL, device), HTP_OK);
  assert_int_equal(htp_mem_alloc(NULL, 0, &device), HTP_ERR_INVALID);
  assert_int_equal(htp_mem_upload(NULL, NULL, host, 4), HTP_ERR_INVALID);
  assert_int_equal(htp_ctx_elapsed(NULL, &seconds), HTP_ERR_INVALID);
  char error[128];
  htp_kernel_env bare;
  htp_kernel_env_init(&bare, error, sizeof error);
  assert_int_equal(htp_cpu_kernel_table()->mark(&bare, 0, 0), HTP_KERNEL_ERR_INVALID);
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
    /* The model's ends and zero have twins; without a device they fail. */
    assert_int_equal(t->patchify_f32(&env, x, y, 1, 2, 2, 2, 2), HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->embed_tokens_f32(&env, x, x, x, y, 1, 1, 2), HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->cls_token_f32(&env, x, y, 1, 2, 2), HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->row_sum_f32(&env, x, y, 2, 2), HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->embed_tokens_backward_f32(&env, x, y, y, y, 1, 1, 2),
                     HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->cls_token_backward_f32(&env, x, y, 1, 2, 2), HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->zero(&env, y, sizeof y), HTP_KERNEL_ERR_SYSTEM);
    assert_non_null(strstr(error, "no CUDA device"));
    /* The backward, loss and optimizer entries (kernels/cuda/train.cu,
     * compared with the CPU's by kernels.train_cuda on a GPU): the same. */
    assert_int_equal(t->linear_backward_f32(&env, x, x, x, y, y, y, 2, 2, 2),
                     HTP_KERNEL_ERR_SYSTEM);
    assert_non_null(strstr(error, "no CUDA device"));
    assert_int_equal(t->layer_norm_backward_f32(&env, x, x, x, y, y, y, 2, 2, 1e-6f),
                     HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->gelu_backward_f32(&env, x, x, y, 8, 0), HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->attention_backward_f32(&env, x, x, x, x, NULL, x, y, y, y, y, y, y, 8, 1,
                                               1, 1, 1, 1),
                     HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->softmax_cross_entropy_f32(&env, x, x, y, y, 2, 2), HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->sgd_momentum_f32(&env, y, x, y, 8, 0.1f, 0.9f, 0.0f, 1),
                     HTP_KERNEL_ERR_SYSTEM);
    assert_int_equal(t->adamw_f32(&env, y, x, y, y, 8, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1),
                     HTP_KERNEL_ERR_SYSTEM);
    assert_non_null(strstr(error, "no CUDA device"));
  }
  /* Every training entry has a twin now (none NULL), and the attention
   * backward's scratch is the CPU kernel's count, which the runtime's
   * balance hooks size it by whatever the device (< 0 on overflow). */
  assert_non_null(t->linear_backward_f32);
  assert_non_null(t->softmax_cross_entropy_f32);
  assert_non_null(t->attention_backward_scratch_floats);
  assert_true(t->attention_backward_scratch_floats(2, 5, 8, 3, 4) ==
              htp_cpu_attention_backward_scratch_floats(2, 5, 8, 3, 4));
  assert_true(t->attention_backward_scratch_floats(INT64_MAX / 2, 5, 8, 3, 4) < 0);
  assert_int_equal(t->sgd_momentum_f32(NULL, y, x, y, 8, 0.1f, 0.9f, 0.0f, 1),
                   HTP_KERNEL_ERR_SYSTEM);
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
      cmocka_unit_test(residual_op_entries),
      cmocka_unit_test(training_op_entries),
      cmocka_unit_test(training_op_entries_refuse),
      cmocka_unit_test(memory_and_timing),
      cmocka_unit_test(cuda_device_selection),
#ifdef HTP_HAVE_CUDA
      cmocka_unit_test(cuda_table_without_device),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
