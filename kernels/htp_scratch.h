/*===- kernels/htp_scratch.h - Kernel scratch sizes, one formula each -----===*
 *
 * How many floats of scratch the CPU attention kernel and the runtime's
 * balance hooks need. The compiler sizes each block's workspace with these
 * (passes/EntryFunction.cpp) and the kernels and hooks carve their scratch
 * by them, so both sides include this one header. Header-only, so the
 * passes need not link the kernels or BLAS. Every function returns -1 when
 * a size is negative or the count does not fit int64_t (the compiler then
 * refuses the block).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_SCRATCH_H
#define HTP_SCRATCH_H

#include <stdint.h>

/* a * b and a + b on sizes; -1 for a negative operand or an overflow. */
static inline int64_t htp__size_mul(int64_t a, int64_t b) {
  if (a < 0 || b < 0 || (b != 0 && a > INT64_MAX / b))
    return -1;
  return a * b;
}
static inline int64_t htp__size_add(int64_t a, int64_t b) {
  if (a < 0 || b < 0 || a > INT64_MAX - b)
    return -1;
  return a + b;
}

/* htp_cpu_attention_f32 (kernels/htp_kernels.h): [qkv: rows * 3 * inner]
 * [context: rows * inner][scores: tokens * tokens], rows = batch * tokens,
 * inner = num_heads * head_dim. model_dim does not enter: the kernel keeps
 * no [rows, model_dim] intermediate. */
static inline int64_t htp_cpu_attention_scratch_floats(int64_t batch, int64_t tokens,
                                                       int64_t model_dim, int64_t num_heads,
                                                       int64_t head_dim) {
  (void)model_dim;
  int64_t rows = htp__size_mul(batch, tokens);
  int64_t context = htp__size_mul(rows, htp__size_mul(num_heads, head_dim));
  int64_t qkv = htp__size_mul(context, 3);
  return htp__size_add(htp__size_add(qkv, context), htp__size_mul(tokens, tokens));
}

/* htp_rt_attention_f32 (runtime/htp.h): the heads' context [rows,
 * num_heads * head_dim], one migrated head's context [rows, head_dim], then
 * the head kernel's own scratch (htp_cpu_attention_heads_f32: rows * 3 *
 * head_dim + tokens * tokens). */
static inline int64_t htp_rt_attention_scratch_floats(int64_t batch, int64_t tokens,
                                                      int64_t num_heads, int64_t head_dim) {
  int64_t rows = htp__size_mul(batch, tokens);
  int64_t head = htp__size_mul(rows, head_dim); /* [rows, head_dim] */
  int64_t heads = htp__size_mul(head, num_heads);
  return htp__size_add(htp__size_add(heads, htp__size_mul(head, 4)),
                       htp__size_mul(tokens, tokens));
}

/* htp_rt_mlp_f32 (runtime/htp.h): the hidden activation [rows, hidden_dim]
 * and one migrated unit's [rows, unit_width]. */
static inline int64_t htp_rt_mlp_scratch_floats(int64_t rows, int64_t hidden_dim,
                                                int64_t unit_width) {
  return htp__size_add(htp__size_mul(rows, hidden_dim), htp__size_mul(rows, unit_width));
}

#endif /* HTP_SCRATCH_H */
