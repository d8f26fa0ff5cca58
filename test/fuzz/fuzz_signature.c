/*===- test/fuzz/fuzz_signature.c - libFuzzer target: entry signatures ---===*
 *
 * Feeds arbitrary bytes to htp_signature_parse (runtime/htp_entry.h), the
 * reader of a compiled block's JSON signature. On success it checks the
 * promises of the header that callers size buffers from: limits, products
 * (count, bytes, global shapes) consistent and within bounds, shard records
 * coherent, names non-empty; then htp_signature_balancer_config. On failure:
 * a message and an empty signature.
 *===----------------------------------------------------------------------===*/
#include "runtime/htp_entry.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(condition)                                                                      \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      fprintf(stderr, "fuzz_signature: broken promise: %s\n", #condition);                  \
      abort();                                                                                \
    }                                                                                         \
  } while (0)

static void check_tensor(const htp_sig_tensor *tensor, int tp) {
  CHECK(tensor->name != NULL && tensor->name[0] != '\0');
  CHECK(strlen(tensor->name) <= HTP_ENTRY_MAX_NAME);
  CHECK(tensor->rank >= 0 && tensor->rank <= HTP_ENTRY_MAX_RANK);
  int64_t count = 1, global_count = 1;
  for (int d = 0; d < tensor->rank; d++) {
    CHECK(tensor->dims[d] >= 1 && tensor->dims[d] <= HTP_ENTRY_MAX_DIM);
    /* Spare room may make an uneven shard's local dim the wider one. */
    CHECK(tensor->global_dims[d] >= tensor->dims[d] ||
          (tensor->shard_units && d == tensor->shard_dim));
    count *= tensor->dims[d];
    global_count *= tensor->global_dims[d];
    CHECK(global_count <= HTP_ENTRY_MAX_TENSOR_BYTES);
  }
  CHECK(count == tensor->count);
  CHECK(tensor->element_size == (tensor->dtype == HTP_SIG_BF16 ? 2u : 4u));
  CHECK(tensor->bytes == (size_t)count * tensor->element_size);
  CHECK(global_count == tensor->global_count);
  CHECK(tensor->global_bytes == (size_t)global_count * tensor->element_size);
  CHECK((int64_t)tensor->global_bytes <= HTP_ENTRY_MAX_TENSOR_BYTES);
  if (tensor->shard_layout == HTP_SHARD_NONE) {
    for (int d = 0; d < tensor->rank; d++)
      CHECK(tensor->global_dims[d] == tensor->dims[d]);
  } else {
    CHECK(tensor->shard_layout == HTP_SHARD_BLOCKS || tensor->shard_layout == HTP_SHARD_QKV);
    CHECK(tensor->shard_dim >= 0 && tensor->shard_dim < tensor->rank);
    CHECK(tensor->shard_parts == tp);
    if (!tensor->shard_units) {
      CHECK(tensor->shard_unit == 0);
      CHECK(tensor->global_dims[tensor->shard_dim] ==
            tensor->dims[tensor->shard_dim] * tensor->shard_parts);
    } else {
      /* Uneven: room for whole units, at least the most any part owns and
       * at most a shard's bound; the global dim holds the owned units. */
      const int64_t blocks = tensor->shard_layout == HTP_SHARD_QKV ? 3 : 1;
      int64_t total = 0, most = 0;
      for (int part = 0; part < tensor->shard_parts; part++) {
        CHECK(tensor->shard_units[part] >= 1 &&
              tensor->shard_units[part] <= HTP_ENTRY_MAX_SHARD_UNITS);
        total += tensor->shard_units[part];
        most = tensor->shard_units[part] > most ? tensor->shard_units[part] : most;
      }
      CHECK(tensor->shard_unit >= 1 && tensor->shard_unit <= HTP_ENTRY_MAX_DIM);
      const int64_t rows = blocks * tensor->shard_unit, local = tensor->dims[tensor->shard_dim];
      CHECK(local % rows == 0 && local / rows >= most &&
            local / rows <= HTP_ENTRY_MAX_SHARD_UNITS);
      CHECK(tensor->global_dims[tensor->shard_dim] == blocks * total * tensor->shard_unit);
    }
    if (tensor->shard_layout == HTP_SHARD_QKV)
      CHECK(tensor->shard_dim == 0 && tensor->dims[0] % 3 == 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly size bytes, not NUL-terminated: the reader must use
   * the length. */
  char *text = malloc(size ? size : 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  htp_signature sig;
  char err[512] = "";
  htp_result result = htp_signature_parse(text, size, &sig, err, sizeof err);
  if (result != HTP_OK) {
    CHECK(err[0] != '\0');
    CHECK(sig.args == NULL && sig.results == NULL && sig.entry == NULL);
    CHECK(sig.num_args == 0 && sig.num_results == 0);
    htp_signature_free(&sig);
    free(text);
    return 0;
  }
  CHECK(sig.entry != NULL && sig.entry[0] != '\0');
  CHECK(sig.tp >= 1 && sig.tp <= HTP_ENTRY_MAX_TP);
  CHECK(sig.num_args >= 0 && sig.num_args <= HTP_ENTRY_MAX_TENSORS);
  CHECK(sig.num_results >= 0 && sig.num_results <= HTP_ENTRY_MAX_TENSORS);
  CHECK((int64_t)sig.workspace_bytes <= HTP_ENTRY_MAX_WORKSPACE_BYTES);
  CHECK(sig.flops >= 0);
  for (int i = 0; i < sig.num_args; i++) {
    CHECK(sig.args[i].role == HTP_SIG_INPUT || sig.args[i].role == HTP_SIG_PARAM);
    check_tensor(&sig.args[i], sig.tp);
  }
  for (int i = 0; i < sig.num_results; i++)
    check_tensor(&sig.results[i], sig.tp);
  htp_balancer_config config = HTP_BALANCER_CONFIG_INITIALIZER;
  htp_result balance = htp_signature_balancer_config(&sig, &config);
  if (sig.balance.present) {
    CHECK(balance == HTP_OK);
    CHECK(sig.balance.layers >= 1 && sig.balance.layers <= HTP_ENTRY_MAX_LAYERS);
    CHECK(sig.balance.heads >= 0 && sig.balance.heads <= HTP_ENTRY_MAX_UNITS);
    CHECK(sig.balance.mlp_units >= 0 && sig.balance.mlp_units <= HTP_ENTRY_MAX_UNITS);
    /* The planner divides by costs: within the range its config check
     * accepts. */
    CHECK(config.planner.unit_cost[HTP_PAIR_MLP] >= HTP_UNIT_COST_MIN &&
          config.planner.unit_cost[HTP_PAIR_MLP] <= HTP_UNIT_COST_MAX);
    CHECK(config.planner.world_size == sig.tp);
    /* Owned units (uneven shares or spare room): both lists or neither,
     * each count within the rank's slots (what the planner's config check
     * asks), in the config. */
    CHECK(!sig.balance.heads_owned == !sig.balance.mlp_units_owned);
    for (int r = 0; sig.balance.heads_owned && r < sig.tp; r++)
      CHECK(sig.balance.heads_owned[r] >= 1 && sig.balance.heads_owned[r] <= sig.balance.heads &&
            sig.balance.mlp_units_owned[r] >= 1 &&
            sig.balance.mlp_units_owned[r] <= sig.balance.mlp_units);
    CHECK(config.planner.owned[HTP_PAIR_ATTENTION] == sig.balance.heads_owned);
    CHECK(config.planner.owned[HTP_PAIR_MLP] == sig.balance.mlp_units_owned);
  } else {
    CHECK(balance != HTP_OK);
  }
  htp_signature_free(&sig);
  CHECK(sig.args == NULL && sig.entry == NULL);
  free(text);
  return 0;
}
