//===- Passes.td - The htp passes ----------------------------*- tablegen -*-===//
//
// Declares every htp pass and its options; the named pipeline that chains
// them is registered in Pipeline.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_PASSES_TD
#define HTP_PASSES_TD

include "mlir/Pass/PassBase.td"

def HTPLowerToRuntime : Pass<"htp-lower-to-runtime", "mlir::ModuleOp"> {
  let summary = "Lower htp functions to LLVM-dialect entry points that call the CPU kernels";
  let description = [{
    Turns every `func.func` made of htp ops into an entry point with the C ABI
    of `tools/htp-run/entry.h`:
    `i32 @F(ptr %rt_ctx, ptr %buffers)`, where `%buffers` points to the
    function's argument buffers, then its result buffers, then one workspace.

    The pass assigns buffers itself: htp functions are straight-line SSA on
    static shapes, so every intermediate gets a 64-byte aligned slot in the
    workspace, reused once the value is dead (first-fit over live intervals),
    and values that are returned are computed in place in the caller's result
    buffer. Each op becomes a call to its kernel in `kernels/htp_kernels.h`.
    The pass also emits `@F__htp_sig`, the text signature the executor reads
    (argument names and shapes, workspace bytes, GEMM FLOPs), and
    `@htp_default_entry` when the module has exactly one entry.
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

#endif // HTP_PASSES_TD
