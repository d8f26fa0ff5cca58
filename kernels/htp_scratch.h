/*===- kernels/htp_scratch.h - Kernel scratch sizes, one formula each -----===*
 *
 * How many floats of scratch each device's attention kernels and the runtime's
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

/* An attention kernel's [qkv: rows * 3 * inner][context: rows * inner]
 * [scores: score_matrices * tokens * tokens], rows = batch * tokens, inner =
 * num_heads * head_dim. */
static inline int64_t htp__attention_scratch_floats(int64_t batch, int64_t tokens,
                                                    int64_t num_heads, int64_t head_dim,
                                                    int64_t score_matrices) {
  int64_t rows = htp__size_mul(batch, tokens);
  int64_t context = htp__size_mul(rows, htp__size_mul(num_heads, head_dim));
  int64_t qkv = htp__size_mul(context, 3);
  int64_t scores = htp__size_mul(score_matrices, htp__size_mul(tokens, tokens));
  return htp__size_add(htp__size_add(qkv, context), scores);
}

/* htp_cpu_attention_f32 (kernels/htp_kernels.h): one head's scores at a
 * time. model_dim does not enter: the kernel keeps no [rows, model_dim]
 * intermediate. */
static inline int64_t htp_cpu_attention_scratch_floats(int64_t batch, int64_t tokens,
                                                       int64_t model_dim, int64_t num_heads,
                                                       int64_t head_dim) {
  (void)model_dim;
  return htp__attention_scratch_floats(batch, tokens, num_heads, head_dim, 1);
}

/* htp_cuda_attention_f32 (kernels/htp_kernels_cuda.h): a batched GEMM per
 * head makes that head's scores of every image at once, so it keeps batch
 * x num_heads score matrices where the CPU keeps one (a loop over the
 * images was launch-bound on an H200: three launches per image). */
static inline int64_t htp_cuda_attention_scratch_floats(int64_t batch, int64_t tokens,
                                                        int64_t model_dim, int64_t num_heads,
                                                        int64_t head_dim) {
  (void)model_dim;
  return htp__attention_scratch_floats(batch, tokens, num_heads, head_dim,
                                       htp__size_mul(batch, num_heads));
}

/* What a compiled block's workspace gives a non-hooked attention: a block
 * names no device (the same .so runs on the CPU or a GPU), so it holds what
 * the hungriest device's kernel needs. */
static inline int64_t htp_attention_scratch_floats(int64_t batch, int64_t tokens,
                                                   int64_t model_dim, int64_t num_heads,
                                                   int64_t head_dim) {
  int64_t cpu = htp_cpu_attention_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);
  int64_t cuda = htp_cuda_attention_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);
  if (cpu < 0 || cuda < 0) return -1;
  return cpu > cuda ? cpu : cuda;
}

/* htp_rt_attention_f32 (runtime/htp_ops.h): the heads' context [rows,
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

/* htp_rt_mlp_f32 (runtime/htp_ops.h): the hidden activation [rows, hidden_dim]
 * and one migrated unit's [rows, unit_width]. */
static inline int64_t htp_rt_mlp_scratch_floats(int64_t rows, int64_t hidden_dim,
                                                int64_t unit_width) {
  return htp__size_add(htp__size_mul(rows, hidden_dim), htp__size_mul(rows, unit_width));
}

/* htp_cpu attention backward (the CPU table's attention_backward_f32,
 * kernels/cpu/backward.c): [qkv: rows * 3 * inner][context: rows * inner][dcontext: rows *
 * inner][dqkv: rows * 3 * inner][slots: min(batch * num_heads,
 * HTP_ATTN_BWD_SLOTS) * 2 * tokens * tokens] (each slot one head's
 * probabilities and their gradient; the slots bound the memory, not the
 * threads that use it, so the size does not depend on the machine). */
enum { HTP_ATTN_BWD_SLOTS = 64 };
/* Where dqkv [rows, 3 * inner] starts in that scratch (inner = heads x
 * head_dim). It stays there after the call: the balancer's same imputation
 * (runtime/balance_hooks.c, backward_same) reads each head's part of it. */
static inline int64_t htp_cpu_attention_backward_dqkv_at(int64_t rows, int64_t inner) {
  return 5 * rows * inner;
}
static inline int64_t htp_cpu_attention_backward_scratch_floats(int64_t batch, int64_t tokens,
                                                                int64_t model_dim,
                                                                int64_t num_heads,
                                                                int64_t head_dim) {
  int64_t rows = htp__size_mul(batch, tokens);
  int64_t inner = htp__size_mul(num_heads, head_dim);
  int64_t wide = htp__size_mul(inner, 3);
  if (model_dim < 0 || wide < 0)
    return -1;
  int64_t first = htp__size_mul(rows, wide);
  int64_t tasks = htp__size_mul(batch, num_heads);
  const int64_t most = HTP_ATTN_BWD_SLOTS; /* not the enum in the ?: (C++ warns) */
  int64_t slots = tasks > most ? most : tasks;
  int64_t slot = htp__size_mul(htp__size_mul(tokens, tokens), 2);
  int64_t total = htp__size_add(first, htp__size_mul(htp__size_mul(rows, inner), 2));
  total = htp__size_add(total, htp__size_mul(rows, wide));
  return htp__size_add(total, htp__size_mul(slots, slot));
}

/* The CUDA attention backward (kernels/cuda/train.cu) carves its scratch as
 * the CPU twin does, so that the balancer reads dqkv at the same place. */
static inline int64_t htp_cuda_attention_backward_scratch_floats(int64_t batch, int64_t tokens,
                                                                 int64_t model_dim,
                                                                 int64_t num_heads,
                                                                 int64_t head_dim) {
  return htp_cpu_attention_backward_scratch_floats(batch, tokens, model_dim, num_heads,
                                                   head_dim);
}

/* The backward's in a compiled block, as htp_attention_scratch_floats. */
static inline int64_t htp_attention_backward_scratch_floats(int64_t batch, int64_t tokens,
                                                            int64_t model_dim,
                                                            int64_t num_heads,
                                                            int64_t head_dim) {
  int64_t cpu = htp_cpu_attention_backward_scratch_floats(batch, tokens, model_dim, num_heads,
                                                          head_dim);
  int64_t cuda = htp_cuda_attention_backward_scratch_floats(batch, tokens, model_dim, num_heads,
                                                            head_dim);
  if (cpu < 0 || cuda < 0) return -1;
  return cpu > cuda ? cpu : cuda;
}

/* Floats of the weights of `units` work units whose first weight has
 * `parts` row blocks (q, k, v: 3; fc1: 1) of `width` rows over model_dim
 * columns: the rows, their bias, and the second weight's [model_dim, width]
 * columns. */
static inline int64_t htp__units_floats(int64_t units, int64_t parts, int64_t width,
                                        int64_t model_dim) {
  int64_t rows = htp__size_mul(parts, width);
  int64_t one = htp__size_add(htp__size_add(htp__size_mul(rows, model_dim), rows),
                              htp__size_mul(model_dim, width));
  return htp__size_mul(units, one);
}

/* htp_rt_attention_grad_f32 (runtime/htp_ops.h): the listed heads' weights
 * compacted and their gradients [2 * units' floats], one dx part [rows,
 * model_dim], then the CPU attention backward's own scratch over all
 * num_heads (a compacted shard has at most as many). */
static inline int64_t htp_rt_attention_grad_scratch_floats(int64_t batch, int64_t tokens,
                                                           int64_t model_dim, int64_t num_heads,
                                                           int64_t head_dim) {
  int64_t weights = htp__size_mul(htp__units_floats(num_heads, 3, head_dim, model_dim), 2);
  int64_t part = htp__size_mul(htp__size_mul(batch, tokens), model_dim);
  return htp__size_add(htp__size_add(weights, part),
                       htp_cpu_attention_backward_scratch_floats(batch, tokens, model_dim,
                                                                 num_heads, head_dim));
}

/* htp_rt_mlp_grad_f32 (runtime/htp_ops.h): the listed units' weights compacted
 * and their gradients [2 * units' floats], one dx part [rows, model_dim],
 * then the pre-activation, the activation and its gradient [rows,
 * hidden_dim] each. */
static inline int64_t htp_rt_mlp_grad_scratch_floats(int64_t rows, int64_t model_dim,
                                                     int64_t hidden_dim, int64_t unit_width) {
  if (unit_width < 1)
    return -1;
  int64_t weights =
      htp__size_mul(htp__units_floats(hidden_dim / unit_width, 1, unit_width, model_dim), 2);
  int64_t part = htp__size_mul(rows, model_dim);
  int64_t hidden = htp__size_mul(htp__size_mul(rows, hidden_dim), 3);
  return htp__size_add(htp__size_add(weights, part), hidden);
}

/* ----- The CUDA kernels' own memory ------------------------------------
 * Beyond the scratch a block hands them, the CUDA kernels keep buffers of
 * their own in the kernel object (kernels/cuda/kernels_internal.h), each
 * grown to the largest request it got and held until the object goes. Each
 * request is one formula below: the CUDA kernels reserve by it, the checked
 * device books it (kernels/checked/table.c), and the compiler bounds a
 * block's (passes/EntryFunction.cpp: the signature's kernel_memory_bytes),
 * so that htp-run counts it against the GPU's memory before a run and
 * checks it after. */
typedef enum htp_cuda_own_buffer {
  HTP_CUDA_OWN_SUMS = 0,    /* f32 sums of the bf16 kernels; the training kernels' doubles */
  HTP_CUDA_OWN_HEADS = 1,   /* the listed-heads kernel's attention scratch and weights */
  HTP_CUDA_OWN_STAGING = 2, /* host lists copied up (the same-device sum's pointers) */
  HTP_CUDA_OWN_LT = 3,      /* cuBLASLt's workspace (the linears' epilogue) */
  HTP_CUDA_OWN_BUFFERS = 4
} htp_cuda_own_buffer;

/* cuBLASLt's workspace: a fixed size, taken once. */
#define HTP_CUDA_LT_WORKSPACE_BYTES ((int64_t)4 << 20)

/* The f32 sums of a bf16 linear with a bias (or fused with GELU) and of
 * the bf16 unit kernels: [rows, columns] floats, in bytes. */
static inline int64_t htp_cuda_sums_bytes(int64_t rows, int64_t columns) {
  return htp__size_mul(htp__size_mul(rows, columns), 4);
}
/* The training kernels' per-row statistics: `count` doubles, in bytes. */
static inline int64_t htp_cuda_doubles_bytes(int64_t count) {
  return htp__size_mul(count, 8);
}
/* The listed-heads kernel on `heads` heads (any list of them; elements of
 * element_bytes): the attention's scratch for that many heads, then (from
 * a 256-byte boundary) their q, k and v weight rows and biases gathered
 * side by side, in bytes. */
static inline int64_t htp_cuda_heads_weights_offset(int64_t batch, int64_t tokens,
                                                    int64_t model_dim, int64_t heads,
                                                    int64_t head_dim) {
  const int64_t scratch = htp__size_mul(
      htp_cuda_attention_scratch_floats(batch, tokens, model_dim, heads, head_dim), 4);
  const int64_t padded = htp__size_add(scratch, 255);
  return padded < 0 ? -1 : padded / 256 * 256;
}
static inline int64_t htp_cuda_heads_bytes(int64_t batch, int64_t tokens, int64_t model_dim,
                                           int64_t heads, int64_t head_dim,
                                           int64_t element_bytes) {
  const int64_t rows = htp__size_mul(htp__size_mul(heads, head_dim), 3); /* of wqkv, bqkv */
  return htp__size_add(
      htp_cuda_heads_weights_offset(batch, tokens, model_dim, heads, head_dim),
      htp__size_mul(htp__size_mul(rows, htp__size_add(model_dim, 1)), element_bytes));
}
/* Two host arrays staged one after the other, the second 16-byte aligned. */
static inline int64_t htp_cuda_staging_bytes(int64_t first_bytes, int64_t second_bytes) {
  int64_t aligned = htp__size_add(first_bytes, 15);
  if (aligned < 0) return -1;
  return htp__size_add(htp__size_add(aligned / 16 * 16, second_bytes), 16);
}

/* The most each own buffer was asked for; -1 in any: a size overflowed. */
typedef struct htp_cuda_own {
  int64_t bytes[HTP_CUDA_OWN_BUFFERS];
} htp_cuda_own;
static inline void htp_cuda_own_need(htp_cuda_own *own, htp_cuda_own_buffer which,
                                     int64_t bytes) {
  if (bytes < 0 || own->bytes[which] < 0) own->bytes[which] = -1;
  else if (bytes > own->bytes[which]) own->bytes[which] = bytes;
}
/* What the buffers hold together (-1: overflow). */
static inline int64_t htp_cuda_own_total(const htp_cuda_own *own) {
  int64_t total = 0;
  for (int i = 0; i < HTP_CUDA_OWN_BUFFERS; ++i)
    total = htp__size_add(total, own->bytes[i]);
  return total;
}

/* ----- The balancer's device memory ------------------------------------
 * On a device the balance hooks keep buffers of the balancer's own in the
 * context's memory (runtime/unit_weights.c, runtime/balance_hooks.c), each
 * grown to its largest request and held until the balancer goes: per pair
 * its migrated-in units, uploaded; shared by the pairs the compact shard's
 * weights, its activations (forward) or its backward's scratch, its weight
 * gradients, and one unit cut out or the migrated units' gradients staged.
 * A rank may come to hold every unit of a layer (its own and those migrated
 * in), so each is bounded at `units`, the layer's units. The compiler sums
 * the bound over a block (passes/EntryFunction.cpp: the signature's
 * balancer_memory_bytes); htp-run counts it against the device's memory
 * before a run and holds the balancer to it after
 * (htp_balancer_device_bytes). */
typedef enum htp_balancer_buffer {
  HTP_BALANCER_COMPACT_WEIGHTS = 0, /* the compact shard's weights */
  HTP_BALANCER_COMPACT_SCRATCH = 1, /* its activations, or the backward's scratch */
  HTP_BALANCER_COMPACT_GRADS = 2,   /* its weight gradients (f32) */
  HTP_BALANCER_UNITS = 3,           /* one unit cut out, or units' gradients (f32) */
  HTP_BALANCER_SHARED_BUFFERS = 4
} htp_balancer_buffer;
typedef struct htp_balancer_memory {
  int64_t shared[HTP_BALANCER_SHARED_BUFFERS]; /* the most each is asked for */
  int64_t packed;                              /* the pairs' migrated-in units, summed */
} htp_balancer_memory;

/* Each buffer's request in 4-byte words, the unit the buffers are kept in
 * (they hold whole floats; -1: overflow). The runtime reserves exactly
 * these for the units it holds, the bound below takes them at a layer's
 * every unit: one formula for both. */
static inline int64_t htp_balancer_words(int64_t elements, int64_t element_bytes) {
  int64_t bytes = htp__size_add(htp__size_mul(elements, element_bytes), 3);
  return bytes < 0 ? -1 : bytes / 4;
}
/* A shard of `units` units (parts, width, model_dim as htp__units_floats):
 * the compact shard's weights, a pair's packed units, one unit cut out; in
 * backward (f32) the compact shard's gradients and the units' gradients. */
static inline int64_t htp_balancer_shard_words(int64_t units, int64_t parts, int64_t width,
                                               int64_t model_dim, int64_t element_bytes) {
  return htp_balancer_words(htp__units_floats(units, parts, width, model_dim), element_bytes);
}
/* The compact shard's activations in forward: rows x units x width. */
static inline int64_t htp_balancer_activation_words(int64_t rows, int64_t units, int64_t width,
                                                    int64_t element_bytes) {
  return htp_balancer_words(htp__size_mul(htp__size_mul(rows, units), width), element_bytes);
}
/* An MLP compact shard's backward scratch (f32): its hidden pre-activation,
 * activation and gradient, rows x units x width each. */
static inline int64_t htp_mlp_compact_backward_scratch_floats(int64_t rows, int64_t units,
                                                              int64_t width) {
  return htp__size_mul(htp__size_mul(htp__size_mul(rows, units), width), 3);
}
static inline void htp__balancer_need(htp_balancer_memory *m, htp_balancer_buffer which,
                                      int64_t words) {
  const int64_t bytes = words < 0 ? -1 : htp__size_mul(words, 4);
  if (bytes < 0 || m->shared[which] < 0) m->shared[which] = -1;
  else if (bytes > m->shared[which]) m->shared[which] = bytes;
}
/* A balanced forward pair (attention: parts 3, width head_dim; MLP: parts
 * 1, width the unit's) over rows = batch x tokens, its layer's `units`
 * units, elements of element_bytes. Once per pair: its packed units. */
static inline void htp_balancer_memory_forward(htp_balancer_memory *m, int64_t parts,
                                               int64_t width, int64_t model_dim, int64_t rows,
                                               int64_t units, int64_t element_bytes) {
  const int64_t all = htp_balancer_shard_words(units, parts, width, model_dim, element_bytes);
  htp__balancer_need(m, HTP_BALANCER_COMPACT_WEIGHTS, all);
  htp__balancer_need(m, HTP_BALANCER_COMPACT_SCRATCH,
                     htp_balancer_activation_words(rows, units, width, element_bytes));
  htp__balancer_need(m, HTP_BALANCER_UNITS,
                     htp_balancer_shard_words(1, parts, width, model_dim, element_bytes));
  const int64_t packed = all < 0 ? -1 : htp__size_mul(all, 4);
  m->packed = m->packed < 0 || packed < 0 ? -1 : htp__size_add(m->packed, packed);
}
/* A balanced pair's backward (f32): scratch_floats is its kernels' scratch
 * over all `units` (the attention backward's, or
 * htp_mlp_compact_backward_scratch_floats). */
static inline void htp_balancer_memory_backward(htp_balancer_memory *m, int64_t parts,
                                                int64_t width, int64_t model_dim,
                                                int64_t units, int64_t scratch_floats) {
  const int64_t all = htp_balancer_shard_words(units, parts, width, model_dim, 4);
  htp__balancer_need(m, HTP_BALANCER_COMPACT_WEIGHTS, all);
  htp__balancer_need(m, HTP_BALANCER_COMPACT_GRADS, all);
  htp__balancer_need(m, HTP_BALANCER_COMPACT_SCRATCH, scratch_floats);
  htp__balancer_need(m, HTP_BALANCER_UNITS, all);
}
/* What the buffers hold together (-1: overflow). */
static inline int64_t htp_balancer_memory_total(const htp_balancer_memory *m) {
  int64_t total = m->packed;
  for (int i = 0; i < HTP_BALANCER_SHARED_BUFFERS; ++i)
    total = htp__size_add(total, m->shared[i]);
  return total;
}

#endif /* HTP_SCRATCH_H */
