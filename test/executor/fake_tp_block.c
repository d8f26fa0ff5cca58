/*===- test/executor/fake_tp_block.c - A hand-written tensor-parallel entry ===*
 *
 * An entry point as --htp-tensor-parallel + htp-compile would write it
 * (runtime/htp_entry.h), for FAKE_TP ranks, so htp-run's multi-rank path
 * (slicing, ranks, collectives, faults, timing) is tested without the
 * compiler. Built with FAKE_TP 1000000 or a FAKE_WORKSPACE of 2^39 bytes it
 * is a block that claims more than any machine holds: htp-run must refuse
 * it before allocating. Per rank:
 *   h = x · w1ᵀ          w1 = fc1.weight, column-parallel (shard dim 0)
 *   y = allreduce(h · w2ᵀ) + b2     w2 = fc2.weight, row-parallel (shard dim 1)
 *   q = allreduce(qkv bias placed at its global rows)   (qkv layout)
 * so y = x W1ᵀ W2ᵀ + b2 and q = the global qkv bias, whatever FAKE_TP is.
 *===----------------------------------------------------------------------===*/
#include "runtime/htp.h"
#include "runtime/htp_entry.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)
#ifndef FAKE_WORKSPACE
#define FAKE_WORKSPACE 256
#endif

enum { B = 4, D = 6, H = 5, Q = 2 }; /* H fc1 rows and Q rows of each of q|k|v per rank */

/* The symbols of runtime/htp_entry.h: names with dots, given through asm
 * labels as the compiler gives them. */
#define SHARD(dim, layout) \
  "\"shard\": {\"dim\": " #dim ", \"parts\": " STR(FAKE_TP) ", \"layout\": \"" layout "\"}"
const char fake_block_signature[] __asm__("htp.sig.fake_block") =
    "{\"htp_entry\": 2, \"entry\": \"fake_block\",\n"
    " \"args\": [\n"
    "  {\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [4, 6]},\n"
    "  {\"name\": \"blocks.0.mlp.fc1.weight\", \"role\": \"param\", \"dtype\": \"f32\",\n"
    "   \"shape\": [5, 6], " SHARD(0, "blocks") "},\n"
    "  {\"name\": \"blocks.0.mlp.fc2.weight\", \"role\": \"param\", \"dtype\": \"f32\",\n"
    "   \"shape\": [6, 5], " SHARD(1, "blocks") "},\n"
    "  {\"name\": \"blocks.0.mlp.fc2.bias\", \"role\": \"param\", \"dtype\": \"f32\",\n"
    "   \"shape\": [6]},\n"
    "  {\"name\": \"blocks.0.attn.qkv.bias\", \"role\": \"param\", \"dtype\": \"f32\",\n"
    "   \"shape\": [6], " SHARD(0, "qkv") "}],\n"
    " \"results\": [\n"
    "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4, 6]},\n"
    "  {\"name\": \"q\", \"dtype\": \"f32\", \"shape\": [" STR(FAKE_QKV_ROWS) "]}],\n"
    " \"workspace_bytes\": " STR(FAKE_WORKSPACE) ", \"flops\": 480, \"tp\": " STR(FAKE_TP) "}";
const char fake_default_entry[] __asm__("htp.default_entry") = "fake_block";

/* What the code below is written for, as the lowering states it beside a
 * compiled block's signature: the loader compares the two. */
#define F32_2D(role, d0, d1, layout, dim, parts) \
  role, HTP_SIG_F32, 4 * (d0) * (d1), 2, d0, d1, 0, 0, 0, 0, 0, 0, layout, dim, parts, -1, 0, 0
#define F32_1D(role, d0, layout, dim, parts) \
  role, HTP_SIG_F32, 4 * (int64_t)(d0), 1, d0, 0, 0, 0, 0, 0, 0, 0, layout, dim, parts, -1, 0, 0
const int64_t fake_block_facts[] __asm__("htp.facts.fake_block") = {
    HTP_FACTS_MAGIC,
    HTP_FACTS_HEADER_WORDS + 7 * HTP_FACTS_TENSOR_WORDS + HTP_FACTS_BALANCE_WORDS,
    sizeof fake_block_signature - 1, FAKE_TP, FAKE_WORKSPACE, 480, 5, 2,
    F32_2D(HTP_SIG_INPUT, B, D, HTP_SHARD_NONE, 0, 0),
    F32_2D(HTP_SIG_PARAM, H, D, HTP_SHARD_BLOCKS, 0, FAKE_TP),
    F32_2D(HTP_SIG_PARAM, D, H, HTP_SHARD_BLOCKS, 1, FAKE_TP),
    F32_1D(HTP_SIG_PARAM, D, HTP_SHARD_NONE, 0, 0),
    F32_1D(HTP_SIG_PARAM, 3 * Q, HTP_SHARD_QKV, 0, FAKE_TP),
    F32_2D(HTP_SIG_RESULT, B, D, HTP_SHARD_NONE, 0, 0),
    F32_1D(HTP_SIG_RESULT, FAKE_QKV_ROWS, HTP_SHARD_NONE, 0, 0),
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 /* no balance record */};

int32_t fake_block(void *rt_ctx, void *const *buffers) __asm__("htp.entry.fake_block");
int32_t fake_block(void *rt_ctx, void *const *buffers) {
  /* FAKE_BLOCK_RETURN=N: the entry fails with code N and no runtime call
   * failing (htp-run must not blame an older error of the context). */
  const char *fail_with = getenv("FAKE_BLOCK_RETURN");
  if (fail_with)
    return (int32_t)atoi(fail_with);
  /* FAKE_BLOCK_NULL: a crash that is no access of device memory (a write
   * through NULL), which the checked device must not blame on one. */
  if (getenv("FAKE_BLOCK_NULL"))
    *(volatile int *)(uintptr_t)getenv("FAKE_BLOCK_NO_SUCH_VARIABLE") = 1;
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
