/*===- test/train/fake_grad_block.c - A hand-written gradient entry -------===*
 *
 * What htp-grad writes for a model, for a model small enough to write by
 * hand, so htp-run --train is tested without the compiler: softmax
 * regression on Fashion-MNIST, logits = x · Wᵀ + b, split for FAKE_TP ranks
 * the Megatron way (W row-parallel: rank r holds columns [r·784/tp,
 * (r+1)·784/tp), its partial products all-reduced). Two entries:
 *   lin_loss_grad(images, targets, head.weight, head.bias)
 *       -> (loss, logits, grad of head.weight (its shard), grad of head.bias)
 *   lin_loss(images, targets, head.weight, head.bias) -> (loss, logits)
 * Loss: mean cross-entropy against the target rows; gradients exact.
 *===----------------------------------------------------------------------===*/
#include "runtime/htp.h"
#include "runtime/htp_entry.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)
#define FAKE_B 32
enum { B = FAKE_B, K = 10, F = 784, L = F / FAKE_TP };

#if FAKE_TP > 1
#define W_SHARD ", \"shard\": {\"dim\": 1, \"parts\": " STR(FAKE_TP) ", \"layout\": \"blocks\"}"
#else
#define W_SHARD ""
#endif
#define ARGS                                                                                 \
  " \"args\": [\n"                                                                           \
  "  {\"name\": \"images\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [" STR(FAKE_B) \
  ", 1, 28, 28]},\n"                                                                         \
  "  {\"name\": \"targets\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [" STR(FAKE_B) \
  ", 10]},\n"                                                                                \
  "  {\"name\": \"head.weight\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [10, "   \
  STR(FAKE_LOCAL) "]" W_SHARD "},\n"                                                             \
  "  {\"name\": \"head.bias\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [10]}],\n"
#define RESULTS                                                                              \
  "  {\"name\": \"loss\", \"dtype\": \"f32\", \"shape\": [1]},\n"                            \
  "  {\"name\": \"logits\", \"dtype\": \"f32\", \"shape\": [" STR(FAKE_B) ", 10]}"

const char grad_signature[] __asm__("htp.sig.lin_loss_grad") =
    "{\"htp_entry\": 2, \"entry\": \"lin_loss_grad\",\n" ARGS " \"results\": [\n" RESULTS ",\n"
    "  {\"name\": \"grad.head.weight\", \"role\": \"grad\", \"grad_of\": \"head.weight\", "
    "\"dtype\": \"f32\", \"shape\": [10, " STR(FAKE_LOCAL) "]" W_SHARD "},\n"
    "  {\"name\": \"grad.head.bias\", \"role\": \"grad\", \"grad_of\": \"head.bias\", "
    "\"dtype\": \"f32\", \"shape\": [10]}],\n"
    " \"workspace_bytes\": 1280, \"tp\": " STR(FAKE_TP) "}";
const char eval_signature[] __asm__("htp.sig.lin_loss") =
    "{\"htp_entry\": 2, \"entry\": \"lin_loss\",\n" ARGS " \"results\": [\n" RESULTS "],\n"
    " \"workspace_bytes\": 1280, \"tp\": " STR(FAKE_TP) "}";

/* What the code below is written for, as the lowering states it beside a
 * compiled block's signature (runtime/htp_entry.h): the loader compares. */
#if FAKE_TP > 1
#define W_SHARD_FACTS HTP_SHARD_BLOCKS, 1, FAKE_TP
#else
#define W_SHARD_FACTS HTP_SHARD_NONE, 0, 0
#endif
/* ... is the shard's layout, dim and parts, then the gradient's argument
 * (no uneven shard: unit and units hash 0). */
#define FACT_RECORD(role, bytes, rank, d0, d1, d2, d3, ...) \
  role, HTP_SIG_F32, bytes, rank, d0, d1, d2, d3, 0, 0, 0, 0, __VA_ARGS__, 0, 0
#define ARGS_FACTS                                                                       \
  FACT_RECORD(HTP_SIG_INPUT, 4 * B * F, 4, B, 1, 28, 28, HTP_SHARD_NONE, 0, 0, -1),      \
      FACT_RECORD(HTP_SIG_INPUT, 4 * B * K, 2, B, K, 0, 0, HTP_SHARD_NONE, 0, 0, -1),    \
      FACT_RECORD(HTP_SIG_PARAM, 4 * K * L, 2, K, L, 0, 0, W_SHARD_FACTS, -1),           \
      FACT_RECORD(HTP_SIG_PARAM, 4 * K, 1, K, 0, 0, 0, HTP_SHARD_NONE, 0, 0, -1)
#define RESULTS_FACTS                                                                    \
  FACT_RECORD(HTP_SIG_RESULT, 4, 1, 1, 0, 0, 0, HTP_SHARD_NONE, 0, 0, -1),               \
      FACT_RECORD(HTP_SIG_RESULT, 4 * B * K, 2, B, K, 0, 0, HTP_SHARD_NONE, 0, 0, -1)
#define NO_BALANCE 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
const int64_t grad_facts[] __asm__("htp.facts.lin_loss_grad") = {
    HTP_FACTS_MAGIC, HTP_FACTS_HEADER_WORDS + 8 * HTP_FACTS_TENSOR_WORDS + HTP_FACTS_BALANCE_WORDS,
    sizeof grad_signature - 1, FAKE_TP, 1280, 0, 4, 4, ARGS_FACTS, RESULTS_FACTS,
    FACT_RECORD(HTP_SIG_GRAD, 4 * K * L, 2, K, L, 0, 0, W_SHARD_FACTS, 2),
    FACT_RECORD(HTP_SIG_GRAD, 4 * K, 1, K, 0, 0, 0, HTP_SHARD_NONE, 0, 0, 3), NO_BALANCE};
const int64_t eval_facts[] __asm__("htp.facts.lin_loss") = {
    HTP_FACTS_MAGIC, HTP_FACTS_HEADER_WORDS + 6 * HTP_FACTS_TENSOR_WORDS + HTP_FACTS_BALANCE_WORDS,
    sizeof eval_signature - 1, FAKE_TP, 1280, 0, 4, 2, ARGS_FACTS, RESULTS_FACTS, NO_BALANCE};

/* logits and loss; dlogits (workspace) when asked. */
static int32_t forward(htp_ctx *ctx, void *const *buffers, float *dlogits) {
  const float *x = buffers[0], *t = buffers[1], *w = buffers[2], *b = buffers[3];
  float *loss = buffers[4], *logits = buffers[5];
  const int rank = ctx ? htp_ctx_rank(ctx) : 0;
  for (int i = 0; i < B; i++)
    for (int k = 0; k < K; k++) {
      double sum = 0;
      for (int j = 0; j < L; j++)
        sum += (double)x[i * F + rank * L + j] * w[k * L + j];
      logits[i * K + k] = (float)sum;
    }
  if (FAKE_TP > 1) {
    htp_result result = htp_allreduce_sum_f32(ctx, logits, logits, B * K);
    if (result != HTP_OK)
      return result;
  }
  double total = 0;
  for (int i = 0; i < B; i++) {
    float *row = logits + i * K;
    double top = -INFINITY, sum = 0;
    for (int k = 0; k < K; k++) {
      row[k] += b[k];
      top = row[k] > top ? row[k] : top;
    }
    for (int k = 0; k < K; k++)
      sum += exp(row[k] - top);
    for (int k = 0; k < K; k++) {
      double p = exp(row[k] - top) / sum;
      total -= t[i * K + k] * (row[k] - top - log(sum));
      if (dlogits)
        dlogits[i * K + k] = (float)((p - t[i * K + k]) / B);
    }
  }
  loss[0] = (float)(total / B);
  return 0;
}

int32_t lin_loss(void *rt_ctx, void *const *buffers) __asm__("htp.entry.lin_loss");
int32_t lin_loss(void *rt_ctx, void *const *buffers) { return forward(rt_ctx, buffers, NULL); }

int32_t lin_loss_grad(void *rt_ctx, void *const *buffers) __asm__("htp.entry.lin_loss_grad");
int32_t lin_loss_grad(void *rt_ctx, void *const *buffers) {
  float *d = buffers[8]; /* workspace */
  int32_t status = forward(rt_ctx, buffers, d);
  if (status)
    return status;
  const float *x = buffers[0];
  float *dw = buffers[6], *db = buffers[7];
  const int rank = rt_ctx ? htp_ctx_rank(rt_ctx) : 0;
  for (int k = 0; k < K; k++) {
    double sum = 0;
    for (int i = 0; i < B; i++)
      sum += d[i * K + k];
    db[k] = (float)sum;
    for (int j = 0; j < L; j++) {
      double g = 0;
      for (int i = 0; i < B; i++)
        g += (double)d[i * K + k] * x[i * F + rank * L + j];
      dw[k * L + j] = (float)g;
    }
  }
  return 0;
}
