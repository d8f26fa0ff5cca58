/*===- runtime/comm_args.c - what ranks must pass alike to a collective ---===*
 *
 * One description of a collective's call (htp__collective_args) and one
 * comparison of two ranks' calls, with the message that says how they
 * differ: the local backend's rendezvous and the mpi backend's agreement
 * both use them, so a mismatch reads the same on every backend.
 *===----------------------------------------------------------------------===*/
#include "runtime/comm_internal.h"

#include <stdio.h>
#include <string.h>

const char *htp__collective_name(htp__collective op) {
  switch (op) {
  case HTP__OP_ALLREDUCE: return htp__allreduce_name(HTP__ELEM_F32);
  case HTP__OP_ALLREDUCE_BF16: return htp__allreduce_name(HTP__ELEM_BF16);
  case HTP__OP_ALLREDUCE_BIAS_RESIDUAL: return htp__allreduce_epilogue_name(HTP__ELEM_F32, 0);
  case HTP__OP_ALLREDUCE_BIAS_RESIDUAL_BF16: return htp__allreduce_epilogue_name(HTP__ELEM_BF16, 0);
  case HTP__OP_ALLREDUCE_NORM: return htp__allreduce_epilogue_name(HTP__ELEM_F32, 1);
  case HTP__OP_ALLREDUCE_NORM_BF16: return htp__allreduce_epilogue_name(HTP__ELEM_BF16, 1);
  case HTP__OP_GROUP_LAYER_NORM: return htp__group_layer_norm_name(HTP__ELEM_F32);
  case HTP__OP_GROUP_LAYER_NORM_BF16: return htp__group_layer_norm_name(HTP__ELEM_BF16);
  case HTP__OP_ALLGATHER: return "htp_allgather";
  case HTP__OP_BROADCAST: return "htp_broadcast";
  case HTP__OP_BARRIER: return "htp_barrier";
  }
  return "an unknown collective";
}

htp__collective htp__allreduce_collective(htp__elem elem, const htp__epilogue *epilogue) {
  const int bf16 = elem == HTP__ELEM_BF16;
  if (!epilogue) return bf16 ? HTP__OP_ALLREDUCE_BF16 : HTP__OP_ALLREDUCE;
  if (epilogue->replicated) return bf16 ? HTP__OP_GROUP_LAYER_NORM_BF16 : HTP__OP_GROUP_LAYER_NORM;
  if (epilogue->normed) return bf16 ? HTP__OP_ALLREDUCE_NORM_BF16 : HTP__OP_ALLREDUCE_NORM;
  return bf16 ? HTP__OP_ALLREDUCE_BIAS_RESIDUAL_BF16 : HTP__OP_ALLREDUCE_BIAS_RESIDUAL;
}

htp__collective_args htp__collective_args_of(htp__collective op, htp__space space, size_t count,
                                             size_t cols, int root,
                                             const htp__epilogue *epilogue) {
  const htp__epilogue *e = epilogue;
  htp__collective_args args = {op, count, cols, root, space, 0, 0.0f};
  if (e) {
    args.parts = (e->bias ? HTP__PART_BIAS : 0) | (e->residual ? HTP__PART_RESIDUAL : 0) |
                 (e->norm_weight ? HTP__PART_NORM_WEIGHT : 0) |
                 (e->norm_bias ? HTP__PART_NORM_BIAS : 0);
    args.epsilon = e->norm_weight ? e->epsilon : 0.0f;
  }
  return args;
}

/* "{a bias, a residual}" for parts, or "no bias, residual or norm weights". */
static const char *parts_text(unsigned parts, char *text, size_t size) {
  static const char *const names[] = {"a bias", "a residual", "a norm weight", "a norm bias"};
  if (!parts) return "no bias, residual or norm weights";
  size_t at = (size_t)snprintf(text, size, "{");
  for (int i = 0; i < 4; ++i)
    if (parts & (1u << i))
      at += (size_t)snprintf(text + at, at < size ? size - at : 0, "%s%s", at > 1 ? ", " : "",
                             names[i]);
  if (at < size) snprintf(text + at, size - at, "}");
  return text;
}

static const char *space_text(htp__space space) {
  return space == HTP__SPACE_HOST ? "host" : "device";
}

int htp__collective_mismatch(const htp__collective_args *first, int rank,
                             const htp__collective_args *other, char *message, size_t size) {
  const char *what = htp__collective_name(first->op);
  if (first->op != other->op)
    snprintf(message, size, "collective mismatch: rank 0 called %s, rank %d called %s", what,
             rank, htp__collective_name(other->op));
  else if (first->count != other->count)
    snprintf(message, size, "%s: count mismatch: rank 0 passed %zu, rank %d passed %zu", what,
             first->count, rank, other->count);
  else if (first->cols != other->cols)
    snprintf(message, size, "%s: row length mismatch: rank 0 passed %zu, rank %d passed %zu",
             what, first->cols, rank, other->cols);
  else if (first->root != other->root)
    snprintf(message, size, "%s: root mismatch: rank 0 passed %d, rank %d passed %d", what,
             first->root, rank, other->root);
  else if (first->space != other->space)
    snprintf(message, size, "%s: rank 0 moves %s memory, rank %d %s memory", what,
             space_text(first->space), rank, space_text(other->space));
  else if (first->parts != other->parts) {
    char mine[96], theirs[96];
    snprintf(message, size,
             "%s: rank 0 passed %s; rank %d %s: every rank passes the same operands",
             what, parts_text(first->parts, mine, sizeof mine), rank,
             parts_text(other->parts, theirs, sizeof theirs));
  } else if (memcmp(&first->epsilon, &other->epsilon, sizeof first->epsilon) != 0)
    snprintf(message, size, "%s: epsilon mismatch: rank 0 passed %g, rank %d passed %g", what,
             (double)first->epsilon, rank, (double)other->epsilon);
  else
    return 0;
  return 1;
}
