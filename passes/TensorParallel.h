//===- TensorParallel.h - The split, for passes that drive it ---*- C++ -*-===//
//
// The Megatron split of --htp-tensor-parallel (TensorParallel.cpp) as a
// function, so that a pass which finds tp and the shares elsewhere (the
// shard import, ShardInterop.cpp) runs the very same rewrite instead of a
// second copy of its head, unit and apportionment rules.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_PASSES_TENSORPARALLEL_H
#define HTP_PASSES_TENSORPARALLEL_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>

namespace mlir::htp {

/// Rewrites `func` into the program one of `tp` ranks runs, exactly as
/// --htp-tensor-parallel="tp=... shares=... mlp-unit-width=... spare=..."
/// does (`shares` empty: even; `mlpUnitWidth` 0: automatic; `spare` percent
/// of room beyond the most units any rank owns). The caller has checked the
/// bounds the pass checks on its options: 2 <= tp <= HTP_ENTRY_MAX_TP,
/// shares empty or one per rank, each from 1 to HTP_ENTRY_MAX_SHARD_UNITS,
/// spare from 0 to 1000. Errors are emitted on the ops they concern.
LogicalResult splitForTensorParallel(func::FuncOp func, int64_t tp, ArrayRef<int64_t> shares,
                                     int64_t mlpUnitWidth, int64_t spare = 0);

/// Names an argument for diagnostics: its htp.param name, or its number.
std::string describeArgument(func::FuncOp func, unsigned index);

} // namespace mlir::htp

#endif // HTP_PASSES_TENSORPARALLEL_H
