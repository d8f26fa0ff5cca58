/*===- kernels/cpu/attention_bf16.h - bf16 attention on the bf16 units ----===*
 *
 * Private to kernels/cpu; built where the GEMMs are oneDNN's
 * (HTP_BLAS_ONEDNN).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CPU_ATTENTION_BF16_H
#define HTP_KERNELS_CPU_ATTENTION_BF16_H

#include "kernels/htp_kernel_table.h"

/* The table's attention_bf16 (same arguments, same contract) as oneDNN bf16
 * matmuls (cpu/attention_bf16.c). Returns 0, or non-zero when it could not
 * (no bf16 matmul for this CPU, too little scratch, out of memory): then y
 * is unspecified and the caller computes it another way. */
int htp__attention_bf16_units(const htp_kernel_env *env, const htp_bf16 *x,
                              const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                              const htp_bf16 *wproj, const htp_bf16 *bproj, htp_bf16 *y,
                              float *scratch, int64_t scratch_floats, int64_t batch,
                              int64_t tokens, int64_t model_dim, int64_t num_heads,
                              int64_t head_dim);

/* The table's attention_heads_bf16 for the list of every head in order
 * (what a balance hook that keeps its heads, or computes a compact shard,
 * asks for): the context [rows, num_heads * head_dim] as the attention
 * above computes it (its qkv in the environment's room). Returns 0, or
 * non-zero (no bf16 matmul, out of memory): then context is unspecified
 * and the caller widens. */
int htp__attention_context_bf16_units(const htp_kernel_env *env, const htp_bf16 *x,
                                      const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                      htp_bf16 *context, int64_t batch, int64_t tokens,
                                      int64_t model_dim, int64_t num_heads, int64_t head_dim);

#endif /* HTP_KERNELS_CPU_ATTENTION_BF16_H */
