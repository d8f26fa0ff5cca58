/*===- test/executor/fake_tp_block.c - A hand-written tensor-parallel entry ===*
 *
 * An entry point as --htp-tensor-parallel + htp-compile would write it
 * (tools/htp-run/entry.h), for FAKE_TP ranks, so htp-run's multi-rank path
 * (slicing, ranks, collectives, faults, timing) is tested without the
 * compiler. Per rank:
 *   h = x · w1ᵀ          w1 = fc1.weight, column-parallel (shard dim 0)
 *   y = allreduce(h · w2ᵀ) + b2     w2 = fc2.weight, row-parallel (shard dim 1)
 *   q = allreduce(qkv bias placed at its global rows)   (qkv layout)
 * so y = x W1ᵀ W2ᵀ + b2 and q = the global qkv bias, whatever FAKE_TP is.
 *===----------------------------------------------------------------------===*/
#include "runtime/htp.h"

#include <stdint.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

enum { B = 4, D = 6, H = 5, Q = 2 }; /* H fc1 rows and Q rows of each of q|k|v per rank */

const char fake_block__htp_sig[] =
    "htp-entry 1\n"
    "entry fake_block\n"
    "arg 0 input x f32 2 4 6\n"
    "arg 1 param blocks.0.mlp.fc1.weight f32 2 5 6\n"
    "arg 2 param blocks.0.mlp.fc2.weight f32 2 6 5\n"
    "arg 3 param blocks.0.mlp.fc2.bias f32 1 6\n"
    "arg 4 param blocks.0.attn.qkv.bias f32 1 6\n"
    "result 0 y f32 2 4 6\n"
    "result 1 q f32 1 " STR(FAKE_QKV_ROWS) "\n"
    "workspace 256\n"
    "flops 480\n"
    "tp " STR(FAKE_TP) "\n"
    "shard 1 0 " STR(FAKE_TP) " blocks\n"
    "shard 2 1 " STR(FAKE_TP) " blocks\n"
    "shard 4 0 " STR(FAKE_TP) " qkv\n"
    "end\n";
const char htp_default_entry[] = "fake_block";

int32_t fake_block(void *rt_ctx, void *const *buffers) {
  const float *x = buffers[0], *w1 = buffers[1], *w2 = buffers[2], *b2 = buffers[3],
              *qkv = buffers[4];
  float *y = buffers[5], *q = buffers[6], *h = buffers[7]; /* workspace: h[B][H] */
  htp_ctx *ctx = rt_ctx;
  int rank = htp_ctx_rank(ctx);
  for (int b = 0; b < B; b++)
    for (int j = 0; j < H; j++) {
      float sum = 0;
      for (int k = 0; k < D; k++)
        sum += x[b * D + k] * w1[j * D + k];
      h[b * H + j] = sum;
    }
  for (int b = 0; b < B; b++)
    for (int i = 0; i < D; i++) {
      float sum = 0;
      for (int j = 0; j < H; j++)
        sum += h[b * H + j] * w2[i * H + j];
      y[b * D + i] = sum;
    }
  htp_result result = htp_allreduce_sum_f32(ctx, y, y, B * D);
  if (result != HTP_OK)
    return result;
  for (int b = 0; b < B; b++)
    for (int i = 0; i < D; i++)
      y[b * D + i] += b2[i];
  memset(q, 0, sizeof(float) * FAKE_QKV_ROWS);
  for (int block = 0; block < 3; block++)
    for (int i = 0; i < Q; i++)
      q[block * Q * FAKE_TP + rank * Q + i] = qkv[block * Q + i];
  return htp_allreduce_sum_f32(ctx, q, q, FAKE_QKV_ROWS);
}
