/*===- runtime/htp_entry.h - The entry ABI of compiled htp blocks ---------===*
 *
 * Public, next to runtime/htp.h (the embedding API) and runtime/htp_ops.h
 * (what a compiled block calls). The seam between the compiler (htp-opt
 * --htp-lower-to-runtime, htp-compile, the JIT in htp-run) and whoever runs
 * a compiled block (htp-run, or a C program that embeds libhtprt). It says
 * which symbols a compiled block exports, how to call its entry point, and
 * what its signature holds; htp_signature_parse reads the signature, so an
 * embedder never re-implements the format or the block's cost model.
 *
 * Symbols. For each function @NAME of the lowered module the compiler emits
 *
 *   int32_t "htp.entry.NAME"(void *rt_ctx, void *const *buffers);
 *   const char "htp.sig.NAME"[];        the signature, NUL-terminated JSON
 *   const int64_t "htp.facts.NAME"[];   what the code was compiled for (below)
 *   const char "htp.default_entry"[];   NAME, when the module has exactly
 *                                       one public function
 *
 * Each data symbol's size is its ELF symbol size (st_size): a loader reads
 * no byte beyond it, so a signature whose NUL was overwritten is refused,
 * never read into the bytes that follow it.
 *
 * The dots keep every generated symbol out of C's namespace: a block whose
 * function is called @memcpy or @htp_allreduce_sum_f32 cannot replace a C
 * library or runtime symbol, and no two functions' symbols can meet. Look
 * them up with dlsym (or the JIT's lookup) by the full name, built with the
 * prefixes below.
 *
 * Calling the entry. buffers[] holds, in order: one pointer per argument
 * (data inputs and parameters, dense row-major, the LOCAL shapes of the
 * signature), one per result (allocated by the caller, written by the block),
 * and last a workspace of workspace_bytes (never NULL; 64-byte aligned).
 * Every op of a block calls the runtime with rt_ctx (its op entry points
 * htp_op_* and the balance hooks htp_rt_*, runtime/htp_ops.h;
 * htp_allreduce_sum_f32), which computes through the context's kernel table,
 * so a compiled block references no device-specific kernel. rt_ctx is the
 * rank's htp_ctx (runtime/htp.h); NULL is allowed for a block that calls no
 * collective (tp 1): its ops then run on the CPU kernel table. The buffers
 * are memory of the context's device (host memory on the CPU). The entry
 * returns 0 (HTP_OK) or the htp_result of the first call that failed (bad
 * arguments, a device error, or with tp > 1 a peer that hung or died), at
 * once.
 *
 * Signature (JSON, format version 2). Unknown keys are ignored by readers,
 * so later versions can add keys; a different "htp_entry" version is
 * refused.
 *
 *   {"htp_entry": 2,
 *    "entry": "NAME",
 *    "args": [{"name": "x", "role": "input", "dtype": "f32",
 *              "shape": [8, 197, 768]},
 *             {"name": "blocks.0.attn.qkv.weight", "role": "param",
 *              "dtype": "f32", "shape": [576, 768],
 *              "shard": {"dim": 0, "parts": 4, "layout": "qkv"}}, ...],
 *    "results": [{"name": "result0", "dtype": "f32", "shape": [8, 197, 768]}],
 *    "workspace_bytes": 123456,
 *    "kernel_memory_bytes": 654321,     (the kernels' own device memory, one rank)
 *    "balancer_memory_bytes": 98765,    (the balancer's device memory, one rank)
 *    "flops": 123456789,                (matrix-product FLOPs per call, one rank)
 *    "tp": 4,
 *    "balance": {"layers": 1, "model_dim": 768, "heads": 3, "head_dim": 64,
 *                "head_flops": ..., "mlp_units": 12, "mlp_unit_width": 64,
 *                "mlp_unit_flops": ...}}          (only with balance hooks)
 *
 *   dtype is "f32" or "bf16" (bfloat16 bit patterns, 2 bytes an element:
 *   kernels/htp_bf16.h); a block's tensors are all of one dtype, but the
 *   reader takes each tensor's own. Every byte size (and the byte limits
 *   below) counts elements of the tensor's dtype.
 *   role is "input" (a data input, htp.input) or "param" (a parameter,
 *   htp.param: timm's name). Shapes are each rank's LOCAL shapes. An
 *   argument with "shard" is rank r's slice of a global tensor whose dim
 *   `dim` is `parts` (= tp) times larger:
 *     "blocks": rows/columns [r * d, (r + 1) * d) of dim `dim` (d = local size);
 *     "qkv":    dim 0 of the global tensor is q | k | v, each ordered by head;
 *               rank r holds slice r of each of the three, in that order.
 *   An uneven shard (htp-opt's shares or spare) adds "units": [u_0, ...,
 *   u_{parts-1}] (each 1 to HTP_ENTRY_MAX_SHARD_UNITS) and "unit": N: along
 *   `dim` (for qkv: in each of the three blocks) the global tensor is sum(u)
 *   units of N rows or columns, rank r owns u_r of them starting at unit
 *   u_0 + ... + u_{r-1}, and every rank's dim is room * N (x 3 for qkv), for
 *   one whole room of max(u) to HTP_ENTRY_MAX_SHARD_UNITS units (more than
 *   max(u) with spare room): its own units first, then empty slots (zeros:
 *   they contribute nothing). The room is the local shape's, in the facts.
 *   Arguments without "shard" are the same on every rank; every result is
 *   complete and identical on every rank, but a gradient (below). A
 *   result's "role", when written, is "result" or "grad"; its "name" is
 *   free ("loss", "logits"; the compiler's default is result<i>). "args"
 *   may be empty, "results" not.
 *   Gradients (htp-grad): a result {"role": "grad", "grad_of": "P", ...}
 *   is the gradient of the loss (result 0) with respect to parameter P,
 *   which must be an argument of role "param" with the same dtype and
 *   local shape, named by at most one gradient. It is P's LOCAL gradient
 *   on each rank: it carries P's "shard" when P has one (the same dim,
 *   parts and layout; no other result may have "shard"), and is the same
 *   on every rank when P is replicated. "grad_of" is allowed only with
 *   role "grad", and role "grad" needs "grad_of".
 *   "tp" (default 1), "flops" (default 0), "kernel_memory_bytes" and
 *   "balancer_memory_bytes" (absent: unknown) and "balance" (absent or
 *   null: no hooks) are optional; every other key above is required.
 *   "kernel_memory_bytes": the most device memory the CUDA kernels may hold
 *   of their own (beside the buffers above: the bf16 kernels' f32 sums, the
 *   every-head attention scratch, staged lists, cuBLASLt's workspace;
 *   kernels/htp_scratch.h) while the block runs on one rank, at most
 *   HTP_ENTRY_MAX_WORKSPACE_BYTES. htp-run counts it against the GPU's
 *   memory before a run and holds the kernels to it after. Not in the facts:
 *   an edited figure changes what htp-run counts and checks, never what is
 *   allocated.
 *   "balancer_memory_bytes" (written with "balance"): the same for the
 *   balancer's own buffers in a device's memory (the compact shards'
 *   weights, activations, scratch and gradients, the migrated-in units:
 *   kernels/htp_scratch.h, htp_balancer_device_bytes), at most
 *   HTP_ENTRY_MAX_WORKSPACE_BYTES; counted and checked as above.
 *   "balance": the block calls the balance hooks (htp_rt_attention_f32,
 *   htp_rt_mlp_f32) for `layers` attention and MLP pairs; per rank `heads`
 *   heads of `head_dim` channels (`head_flops` each per call) and
 *   `mlp_units` units of `mlp_unit_width` neurons (`mlp_unit_flops` each),
 *   in a block of width `model_dim`. An uneven split (shares or spare
 *   room) adds "heads_owned" and "mlp_units_owned" (both or neither): tp
 *   counts, rank r owning the first heads_owned[r] of its `heads` slots (1
 *   to heads: `heads` is the room), and so on.
 *
 * Limits, checked by htp_signature_parse before anything is sized from the
 * signature (an absurd claim is refused, never allocated): the constants
 * below. Every dim is >= 1 (zero-sized tensors are rejected, here and by the
 * dialect's verifiers). Names are 1 to HTP_ENTRY_MAX_NAME bytes of valid
 * UTF-8 without control characters (C0, DEL, C1) or NUL: spaces are fine. The
 * whole block's FLOPs (flops x tp), each global shape, one balance unit's
 * weights and heads x head_dim / mlp_units x mlp_unit_width fit too. These
 * limits bound what one signature can claim; whether a machine can hold it
 * is the caller's check (htp-run compares the bytes it would allocate with
 * the physical memory before allocating any).
 *
 * Facts (format HTP_FACTS_MAGIC). The signature is text anyone can edit in
 * a .so without touching the code: shrink a result's shape and the code
 * still writes the bytes it was compiled for, past the buffer sized from the
 * JSON. So the lowering also emits "htp.facts.NAME", an int64 array of every
 * number a caller sizes, slices or plans from, taken from the function's
 * types as the op patterns are (not from the JSON), and a loader compares
 * it with the parsed signature field by field: an edit to either one alone
 * shows as a mismatch that can be named. (Someone who edits both consistently
 * is not stopped: this ties the signature to its code, it does not sign it.)
 * Names and the entry name are not repeated: the symbols carry NAME, and a
 * loader checks the signature's "entry" against the name it looked up.
 *   words [0, HTP_FACTS_HEADER_WORDS): indexed by htp_facts_header;
 *   then one record of HTP_FACTS_TENSOR_WORDS per argument, then per
 *   result, indexed by htp_facts_tensor: role (htp_sig_role), dtype
 *   (htp_sig_dtype), bytes, rank, dims (HTP_ENTRY_MAX_RANK words, 0 past
 *   the rank), shard layout (htp_shard_layout), shard dim and parts (0 when
 *   not sharded), the argument a gradient is of (-1 for any other tensor),
 *   an uneven shard's unit and htp_facts_units_hash of its units (0 and 0
 *   for an even shard or none);
 *   then HTP_FACTS_BALANCE_WORDS: present (0 or 1), then "balance"'s eight
 *   fields in the order written above (0 when absent), then
 *   htp_facts_units_hash of "heads_owned" and of "mlp_units_owned" (0 when
 *   absent).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_ENTRY_H
#define HTP_ENTRY_H

#include "runtime/htp.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t (*htp_entry_fn)(void *rt_ctx, void *const *buffers);

#define HTP_ENTRY_SYMBOL_PREFIX "htp.entry."
#define HTP_SIGNATURE_SYMBOL_PREFIX "htp.sig."
#define HTP_DEFAULT_ENTRY_SYMBOL "htp.default_entry"
#define HTP_FACTS_SYMBOL_PREFIX "htp.facts."
#define HTP_ENTRY_FORMAT_VERSION 2
/* Word 0 of a facts array: "HTPF" and the facts format, 1. */
#define HTP_FACTS_MAGIC INT64_C(0x4854504602)

/* The header words of a facts array (above). */
typedef enum htp_facts_header {
  HTP_FACTS_FORMAT = 0,          /* HTP_FACTS_MAGIC */
  HTP_FACTS_WORDS = 1,           /* the array's length in words */
  HTP_FACTS_SIGNATURE_BYTES = 2, /* the signature's length, its NUL not counted */
  HTP_FACTS_TP = 3,
  HTP_FACTS_WORKSPACE_BYTES = 4,
  HTP_FACTS_FLOPS = 5,
  HTP_FACTS_NUM_ARGS = 6,
  HTP_FACTS_NUM_RESULTS = 7,
  HTP_FACTS_HEADER_WORDS = 8
} htp_facts_header;

/* The words of one tensor's record in a facts array. */
typedef enum htp_facts_tensor {
  HTP_FACT_ROLE = 0,
  HTP_FACT_DTYPE = 1,
  HTP_FACT_BYTES = 2,
  HTP_FACT_RANK = 3,
  HTP_FACT_DIMS = 4, /* HTP_ENTRY_MAX_RANK words */
  HTP_FACT_SHARD_LAYOUT = 12,
  HTP_FACT_SHARD_DIM = 13,
  HTP_FACT_SHARD_PARTS = 14,
  HTP_FACT_GRAD_ARG = 15,
  HTP_FACT_SHARD_UNIT = 16,       /* an uneven shard's unit, else 0 */
  HTP_FACT_SHARD_UNITS_HASH = 17, /* htp_facts_units_hash of its units, else 0 */
  HTP_FACTS_TENSOR_WORDS = 18
} htp_facts_tensor;

enum { HTP_FACTS_BALANCE_WORDS = 11 };

/* Limits of a signature (documented in the README). */
enum {
  HTP_ENTRY_MAX_RANK = 8,          /* dims per tensor */
  HTP_ENTRY_MAX_TENSORS = 4096,    /* arguments, and results */
  HTP_ENTRY_MAX_NAME = 4096,       /* bytes of a name */
  HTP_ENTRY_MAX_TP = 1024,         /* ranks */
  HTP_ENTRY_MAX_LAYERS = 1 << 16,  /* balance layers: the planner's num_layers */
  HTP_ENTRY_MAX_UNITS = 1 << 20    /* heads or MLP units per rank: its units_per_rank */
};
#define HTP_ENTRY_MAX_DIM INT64_C(2147483647)            /* 2^31 - 1: BLAS's int */
#define HTP_ENTRY_MAX_SHARD_UNITS INT64_C(1048576)      /* 2^20: one rank's units of a shard */
#define HTP_ENTRY_MAX_TENSOR_BYTES (INT64_C(1) << 40)    /* 1 TiB, global shape */
#define HTP_ENTRY_MAX_WORKSPACE_BYTES (INT64_C(1) << 40)

/* HTP_SIG_GRAD: a result that is a parameter's gradient (grad_of). */
typedef enum htp_sig_role {
  HTP_SIG_INPUT,
  HTP_SIG_PARAM,
  HTP_SIG_RESULT,
  HTP_SIG_GRAD
} htp_sig_role;

/* How a sharded argument is cut out of its global tensor (above). */
typedef enum htp_shard_layout {
  HTP_SHARD_NONE = 0,   /* not sharded: the same on every rank */
  HTP_SHARD_BLOCKS = 1, /* slice r of dim shard_dim */
  HTP_SHARD_QKV = 2     /* dim 0 is q | k | v; slice r of each of the three */
} htp_shard_layout;

/* A tensor's element type ("dtype"): f32, or bf16 stored as its bit
 * patterns (kernels/htp_bf16.h; arithmetic on it is done in f32). */
typedef enum htp_sig_dtype {
  HTP_SIG_F32 = 0,  /* "f32", 4 bytes */
  HTP_SIG_BF16 = 1  /* "bf16", 2 bytes */
} htp_sig_dtype;

typedef struct htp_sig_tensor {
  htp_sig_role role;
  char *name;                               /* NUL-terminated, validated */
  int rank;                                 /* 0 to HTP_ENTRY_MAX_RANK */
  int64_t dims[HTP_ENTRY_MAX_RANK];         /* local shape */
  int64_t count;                            /* prod(dims) */
  size_t bytes;                             /* count * element_size */
  htp_shard_layout shard_layout;            /* HTP_SHARD_NONE without "shard" */
  int shard_dim, shard_parts;
  int32_t *shard_units;                     /* uneven: shard_parts counts (owned, each at
                                             * most the room: dims[shard_dim] / unit, / 3 for
                                             * qkv), else NULL */
  int64_t shard_unit;                       /* uneven: rows or columns a unit, else 0 */
  int64_t global_dims[HTP_ENTRY_MAX_RANK];  /* dims[shard_dim] * shard_parts, or uneven:
                                             * sum(units) * unit (x 3 for qkv) */
  int64_t global_count;
  size_t global_bytes;                      /* global_count * element_size */
  htp_sig_dtype dtype;
  size_t element_size;                      /* bytes of one element: 4 or 2 */
  char *grad_of;                            /* HTP_SIG_GRAD: the parameter's name
                                             * (validated, owned); else NULL */
  int grad_arg;                             /* HTP_SIG_GRAD: its index in args */
} htp_sig_tensor;

/* The "balance" object; present is 0 without it (no units to balance). */
typedef struct htp_sig_balance {
  int present;
  int layers;
  int64_t model_dim;
  int heads;              /* per rank */
  int64_t head_dim;
  int64_t head_flops;     /* per head per call */
  int mlp_units;          /* per rank */
  int64_t mlp_unit_width; /* neurons per unit */
  int64_t mlp_unit_flops; /* per unit per call */
  int32_t *heads_owned;     /* uneven shares: tp counts (1 to heads), else NULL */
  int32_t *mlp_units_owned; /* the same for MLP units (1 to mlp_units) */
} htp_sig_balance;

typedef struct htp_signature {
  char *entry;
  int num_args;
  htp_sig_tensor *args;     /* inputs and params, in buffer order */
  int num_results;
  htp_sig_tensor *results;
  size_t workspace_bytes;
  int64_t kernel_memory_bytes; /* the CUDA kernels' own memory at most; -1 when absent */
  int64_t balancer_memory_bytes; /* the balancer's device memory at most; -1 when absent */
  int64_t flops;            /* per call, one rank; 0 when absent */
  int tp;                   /* 1 when absent */
  htp_sig_balance balance;
} htp_signature;

/* The hash of a list of unit counts in the facts (an uneven shard's units,
 * the balance record's owned units): FNV-1a over the counts' 4
 * little-endian bytes each, top bit cleared; 0 for no list. The lowering
 * and the loader compute it alike. */
static inline int64_t htp_facts_units_hash(const int32_t *units, int count) {
  if (!units)
    return 0;
  uint64_t hash = UINT64_C(14695981039346656037);
  for (int i = 0; i < count; i++)
    for (int byte = 0; byte < 4; byte++) {
      hash ^= ((uint32_t)units[i] >> (8 * byte)) & 0xff;
      hash *= UINT64_C(1099511628211);
    }
  return (int64_t)(hash >> 1);
}

/* Parses and validates the JSON signature text (length bytes; a NUL inside
 * is an error) into *sig, which the caller frees with htp_signature_free.
 * Checks every field's type and range, the limits above, that shard parts
 * equal tp, that a qkv shard is of dim 0 with a multiple of 3 rows, that
 * every product (elements, bytes, global shapes, FLOPs) fits, and that
 * each gradient names a distinct parameter of its dtype, shape and shard. Returns
 * HTP_OK, or HTP_ERR_INVALID with a message naming the field (and the JSON
 * line and column for a syntax error) in err; *sig is then empty.
 * HTP_ERR_NOMEM. Thread safe. */
HTP_API htp_result htp_signature_parse(const char *text, size_t length, htp_signature *sig, char *err,
                               size_t err_size);
/* Frees what parse allocated and empties *sig; accepts an empty *sig. */
HTP_API void htp_signature_free(htp_signature *sig);

/* What a balancer for this block needs from its signature: config->planner's
 * world_size (tp), num_layers, units_per_rank and unit_cost (relative: a
 * head costs 1, an MLP unit mlp_unit_flops / head_flops, clamped into
 * [HTP_UNIT_COST_MIN, HTP_UNIT_COST_MAX]), and model_dim,
 * head_dim, mlp_unit_width. Other fields (policy, selection, seed, impute)
 * are left as the caller set them. HTP_ERR_INVALID when the block has no
 * balance record. */
HTP_API htp_result htp_signature_balancer_config(const htp_signature *sig,
                                         htp_balancer_config *config);

#ifdef __cplusplus
}
#endif

#endif /* HTP_ENTRY_H */
