/*===- tools/htp-run/entry.h - The seam between compiler and executor -----===*
 *
 * htp-run is two halves (DESIGN §7). The compiler half (C++, MLIR) turns a
 * .mlir file into an entry point, by JIT or ahead of time into a shared
 * object (htp-compile); the executor half (C, builds without MLIR) binds data,
 * runs, times and reports. This header is everything the two share.
 *
 * A compiled entry point ENTRY is two symbols:
 *
 *   int32_t ENTRY(void *rt_ctx, void *const *buffers);
 *     Runs the block once. buffers[] holds, in order: one pointer per function
 *     argument (inputs and parameters, dense row-major), one per result (the
 *     caller allocates them; the block writes them), and, last, a workspace of
 *     the size the signature names (never NULL; 64-byte aligned). rt_ctx is the
 *     rank's runtime context (htp_ctx *), or NULL when the block calls no
 *     runtime function. Returns 0 (HTP_OK) or an htp_result error code.
 *
 *   const char ENTRY__htp_sig[];
 *     The signature, NUL-terminated text, one record per line, fields split
 *     by single spaces:
 *       htp-entry 1
 *       entry NAME
 *       arg INDEX input NAME DTYPE RANK D0 D1 ...      (a data input)
 *       arg INDEX param NAME DTYPE RANK D0 D1 ...      (a parameter, timm name)
 *       result INDEX NAME DTYPE RANK D0 D1 ...
 *       workspace BYTES
 *       flops N                                        (per call, for GFLOP/s)
 *       tp N                                           (optional; ranks the block was split for)
 *       shard INDEX DIM PARTS LAYOUT                   (optional; argument INDEX is a shard)
 *       balance LAYERS DIM HEADS HEAD_DIM HEAD_FLOPS MLP_UNITS MLP_WIDTH MLP_UNIT_FLOPS
 *                                                      (optional; the block has balance hooks)
 *       end
 *     DTYPE is f32 for now. Unknown record kinds must be ignored by readers
 *     (so later issues can add records), but "end" must be present.
 *
 *     Tensor parallelism (written by --htp-tensor-parallel, DESIGN §1). With
 *     "tp N", N > 1, every rank runs the same entry on its own buffers and
 *     rt_ctx must be that rank's htp_ctx (the block calls
 *     htp_allreduce_sum_f32 on it). Arg records then give each rank's LOCAL
 *     shape. An argument with a "shard" record is a slice of a global
 *     parameter whose dim DIM is PARTS times larger (the global shape is the
 *     local one with D_DIM * PARTS); rank r holds slice r:
 *       LAYOUT "blocks": rows/columns [r * D_DIM, (r + 1) * D_DIM) of dim DIM;
 *       LAYOUT "qkv":    DIM is 0 and the global dim is three equal blocks
 *                        (q | k | v, each ordered by head); rank r holds, in
 *                        order, slice r of each of the three blocks.
 *     Arguments without a shard record (data inputs, layer norms, biases
 *     added after an all-reduce, replicated linears) are the same on every
 *     rank. Every result is complete and identical on every rank.
 *
 *     Balance hooks (written by --htp-balance-hooks). A "balance" record says
 *     the block calls the runtime's hooks (runtime/htp.h: htp_rt_attention_f32,
 *     htp_rt_mlp_f32) for its LAYERS attention and MLP pairs: per rank, HEADS
 *     heads of HEAD_DIM channels (HEAD_FLOPS per head per call) and MLP_UNITS
 *     units of MLP_WIDTH neurons (MLP_UNIT_FLOPS each), in a block of width
 *     DIM. That is the htp_balancer_config the executor attaches to each
 *     rank's context; with none attached the hooks compute every unit.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_ENTRY_H
#define HTP_RUN_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t (*htp_entry_fn)(void *rt_ctx, void *const *buffers);

#define HTP_SIG_SUFFIX "__htp_sig"

/* Options the executor forwards to the compiler half. */
typedef struct htp_compile_options {
  int tp;                 /* tensor-parallel degree; 1 = unsharded */
  const char *pipeline;   /* extra pipeline text, or NULL for the default */
} htp_compile_options;

/* A loaded entry point: what either half hands the executor. */
typedef struct htp_compiled {
  htp_entry_fn fn;
  const char *signature;  /* owned by the loader, valid until unload */
  void *handle;           /* loader's private state */
} htp_compiled;

/* The compiler half, as a vtable so the executor builds without it. */
typedef struct htp_compiler {
  /* Compiles PATH (a .mlir file) and looks up ENTRY (NULL: the only public
   * function, an error if there are several). On failure returns non-zero
   * and writes a message (diagnostics included) to err. */
  int (*load)(const char *path, const char *entry, const htp_compile_options *options,
              htp_compiled *out, char *err, size_t err_size);
  void (*unload)(htp_compiled *compiled);
} htp_compiler;

/* The JIT, or NULL in a build without MLIR (tools/compiler/). */
const htp_compiler *htp_jit_compiler(void);

/* htp-run's whole command line; the executor half (tools/htp-run/executor.c).
 * jit may be NULL: then only shared objects from htp-compile can be run. */
int htp_run_main(int argc, char **argv, const htp_compiler *jit);

#ifdef __cplusplus
}
#endif

#endif /* HTP_RUN_ENTRY_H */
