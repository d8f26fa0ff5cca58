//===- EntryFunction.cpp - What the htp passes share about entry functions ===//
//
// Sizes, scratch formulas, the shape check and the placement's overlap
// check shared by the workspace assignment and the lowering
// (EntryFunction.h).
//
//===----------------------------------------------------------------------===//

#include "passes/EntryFunction.h"

#include "dialect/HTPOps.h"
#include "kernels/htp_kernels.h"
#include "runtime/htp_ops.h"

#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::htp;

CheckedInt htp::alignToWorkspace(int64_t bytes) {
  std::optional<int64_t> padded = llvm::checkedAdd(bytes, kWorkspaceAlignment - 1);
  return padded ? CheckedInt(*padded / kWorkspaceAlignment * kWorkspaceAlignment)
                : CheckedInt::overflowed();
}

CheckedInt htp::elementCount(RankedTensorType type) {
  CheckedInt count = 1;
  for (int64_t dim : type.getShape())
    count = count * dim;
  return count;
}

int64_t htp::leadingRows(RankedTensorType type) {
  return type.getNumElements() / std::max<int64_t>(type.getShape().back(), 1);
}

int64_t htp::byteSize(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return type.getNumElements() * elementBytes(type.getElementType());
}

StringRef htp::dtypeName(Type elementType) {
  return elementType.isBF16() ? "bf16" : "f32";
}

Type htp::opElementType(Operation *op) {
  return getElementTypeOrSelf(op->getOperand(0).getType());
}

std::optional<int64_t> htp::scratchBytes(Operation *op) {
  int64_t floats = 0;
  if (auto attention = dyn_cast<AttentionOp>(op)) {
    auto input = cast<RankedTensorType>(attention.getInput().getType());
    int64_t batch = input.getDimSize(0), tokens = input.getDimSize(1);
    floats = attention.getPair()
                 ? htp_rt_attention_scratch_floats(batch, tokens, attention.getNumHeads(),
                                                   attention.getHeadDim())
                 : htp_attention_scratch_floats(batch, tokens, input.getDimSize(2),
                                                attention.getNumHeads(), attention.getHeadDim());
  } else if (auto mlp = dyn_cast<MLPOp>(op)) {
    auto hidden = cast<RankedTensorType>(mlp.getFc1Weight().getType()).getDimSize(0);
    floats = htp_rt_mlp_scratch_floats(leadingRows(mlp.getType()), hidden, mlp.getUnitWidth());
  } else if (isa<ZerosLikeOp>(op)) {
    // Two copies of the tensor: cls_token's adjoint writes its zeros into
    // the second (OpLowerings.cpp).
    std::optional<int64_t> elements =
        (elementCount(cast<RankedTensorType>(op->getOperand(0).getType())) * 2).get();
    if (!elements)
      return std::nullopt;
    floats = *elements;
  } else if (isa<PatchEmbedOp, PatchEmbedGradOp>(op)) {
    // The patches, [B*N, C*P*P]: as many floats as the images (B*C*H*W).
    std::optional<int64_t> elements =
        elementCount(cast<RankedTensorType>(op->getOperand(0).getType())).get();
    if (!elements)
      return std::nullopt;
    floats = *elements;
  } else if (auto attentionGrad = dyn_cast<AttentionGradOp>(op)) {
    auto input = cast<RankedTensorType>(attentionGrad.getInput().getType());
    floats = (attentionGrad.getPair() ? htp_rt_attention_grad_scratch_floats
                                      : htp_attention_backward_scratch_floats)(
        input.getDimSize(0), input.getDimSize(1), input.getDimSize(2),
        attentionGrad.getNumHeads(), attentionGrad.getHeadDim());
  } else if (auto mlpGrad = dyn_cast<MLPGradOp>(op)) {
    auto input = cast<RankedTensorType>(mlpGrad.getInput().getType());
    auto hidden = cast<RankedTensorType>(mlpGrad.getFc1Weight().getType()).getDimSize(0);
    floats = htp_rt_mlp_grad_scratch_floats(leadingRows(input), input.getShape().back(), hidden,
                                            mlpGrad.getUnitWidth());
  }
  if (floats < 0) // the formulas' overflow
    return std::nullopt;
  return (CheckedInt(floats) * static_cast<int64_t>(sizeof(float))).get();
}

std::optional<int64_t> htp::kernelMemoryBytes(func::FuncOp func) {
  htp_cuda_own own = {};
  auto need = [&](htp_cuda_own_buffer which, int64_t bytes) {
    htp_cuda_own_need(&own, which, bytes);
  };
  auto tpAttr = func->getAttrOfType<IntegerAttr>(kTPAttrName);
  const int64_t tp = tpAttr ? tpAttr.getInt() : 1;
  func.walk([&](Operation *op) {
    const bool bf16 = op->getNumOperands() && opElementType(op).isBF16();
    if (auto linear = dyn_cast<LinearOp>(op)) {
      // bf16: the f32 sum of a biased linear, or the GEMM before a fused GELU.
      auto weight = cast<RankedTensorType>(linear.getWeight().getType());
      if (bf16)
        need(HTP_CUDA_OWN_SUMS, htp_cuda_sums_bytes(
                                    leadingRows(cast<RankedTensorType>(linear.getType())),
                                    weight.getDimSize(0)));
      if (linear.getBias())
        need(HTP_CUDA_OWN_LT, HTP_CUDA_LT_WORKSPACE_BYTES);
    } else if (auto attention = dyn_cast<AttentionOp>(op)) {
      auto input = cast<RankedTensorType>(attention.getInput().getType());
      const int64_t batch = input.getDimSize(0), tokens = input.getDimSize(1),
                    dim = input.getDimSize(2), rows = batch * tokens;
      const int64_t headDim = attention.getHeadDim();
      int64_t heads = attention.getNumHeads();
      if (attention.getPair()) {
        heads = htp__size_mul(heads, tp); // a compact shard: up to the layer's heads
        need(HTP_CUDA_OWN_HEADS,
             htp_cuda_heads_bytes(batch, tokens, dim, heads, headDim, bf16 ? 2 : 4));
      }
      if (bf16) {
        need(HTP_CUDA_OWN_SUMS,
             htp_cuda_sums_bytes(rows, htp__size_mul(htp__size_mul(heads, headDim), 3)));
        need(HTP_CUDA_OWN_SUMS, htp_cuda_sums_bytes(rows, dim)); // the projection
      }
      need(HTP_CUDA_OWN_LT, HTP_CUDA_LT_WORKSPACE_BYTES);
    } else if (auto mlp = dyn_cast<MLPOp>(op)) {
      if (bf16) {
        auto fc1 = cast<RankedTensorType>(mlp.getFc1Weight().getType());
        const int64_t rows = leadingRows(cast<RankedTensorType>(mlp.getType()));
        need(HTP_CUDA_OWN_SUMS, htp_cuda_sums_bytes(rows, htp__size_mul(fc1.getDimSize(0), tp)));
        need(HTP_CUDA_OWN_SUMS, htp_cuda_sums_bytes(rows, fc1.getDimSize(1)));
      }
    } else if (isa<LayerNormGradOp>(op)) {
      const int64_t rows = leadingRows(cast<RankedTensorType>(op->getOperand(0).getType()));
      need(HTP_CUDA_OWN_SUMS, htp_cuda_doubles_bytes(htp__size_mul(rows, 2)));
    } else if (isa<CrossEntropyOp, CrossEntropyGradOp>(op)) {
      need(HTP_CUDA_OWN_SUMS, htp_cuda_doubles_bytes(leadingRows(
                                  cast<RankedTensorType>(op->getOperand(0).getType()))));
    }
  });
  // The same-device sum of the ranks' partials stages their pointers (one
  // rank's too: a hand-written all-reduce runs at tp 1).
  const bool sums = tp > 1 || func.walk([](Operation *op) {
                                    return isa<AllReduceOp, AllReduceNormOp>(op)
                                               ? WalkResult::interrupt()
                                               : WalkResult::advance();
                                  }).wasInterrupted();
  if (sums)
    need(HTP_CUDA_OWN_STAGING, htp_cuda_staging_bytes(htp__size_mul(tp, 8), 0));
  const int64_t total = htp_cuda_own_total(&own);
  if (total < 0)
    return std::nullopt;
  return total;
}

std::optional<int64_t> htp::balancerMemoryBytes(func::FuncOp func) {
  htp_balancer_memory memory = {};
  auto tpAttr = func->getAttrOfType<IntegerAttr>(kTPAttrName);
  const int64_t tp = tpAttr ? tpAttr.getInt() : 1;
  func.walk([&](Operation *op) {
    const int64_t elementBytes = op->getNumOperands() && opElementType(op).isBF16() ? 2 : 4;
    if (auto attention = dyn_cast<AttentionOp>(op)) {
      if (!attention.getPair())
        return;
      auto input = cast<RankedTensorType>(attention.getInput().getType());
      htp_balancer_memory_forward(
          &memory, 3, attention.getHeadDim(), input.getDimSize(2),
          htp__size_mul(input.getDimSize(0), input.getDimSize(1)),
          htp__size_mul(attention.getNumHeads(), tp), elementBytes);
    } else if (auto mlp = dyn_cast<MLPOp>(op)) {
      auto fc1 = cast<RankedTensorType>(mlp.getFc1Weight().getType());
      const int64_t width = mlp.getUnitWidth();
      htp_balancer_memory_forward(&memory, 1, width, fc1.getDimSize(1),
                                  leadingRows(cast<RankedTensorType>(mlp.getType())),
                                  htp__size_mul(fc1.getDimSize(0) / width, tp), elementBytes);
    } else if (auto attentionGrad = dyn_cast<AttentionGradOp>(op)) {
      if (!attentionGrad.getPair())
        return;
      auto input = cast<RankedTensorType>(attentionGrad.getInput().getType());
      const int64_t heads = htp__size_mul(attentionGrad.getNumHeads(), tp);
      const int64_t headDim = attentionGrad.getHeadDim(), dim = input.getDimSize(2);
      htp_balancer_memory_backward(
          &memory, 3, headDim, dim, heads,
          htp_attention_backward_scratch_floats(input.getDimSize(0), input.getDimSize(1), dim,
                                                heads, headDim));
    } else if (auto mlpGrad = dyn_cast<MLPGradOp>(op)) {
      auto input = cast<RankedTensorType>(mlpGrad.getInput().getType());
      auto fc1 = cast<RankedTensorType>(mlpGrad.getFc1Weight().getType());
      const int64_t width = mlpGrad.getUnitWidth();
      const int64_t units = htp__size_mul(fc1.getDimSize(0) / width, tp);
      htp_balancer_memory_backward(
          &memory, 1, width, input.getShape().back(), units,
          htp_mlp_compact_backward_scratch_floats(leadingRows(input), units, width));
    }
  });
  const int64_t total = htp_balancer_memory_total(&memory);
  if (total < 0)
    return std::nullopt;
  return total;
}

std::optional<int64_t> htp::workspaceOffset(Operation *op, unsigned index) {
  auto offsets = op->getAttrOfType<DenseI64ArrayAttr>(kWorkspaceOffsetsAttrName);
  if (!offsets || index >= static_cast<unsigned>(offsets.size()) ||
      offsets[index] == kInResultBuffer)
    return std::nullopt;
  return offsets[index];
}

LogicalResult htp::checkEntryFunction(func::FuncOp func) {
  // Every size the passes compute is computed from these types: their
  // bytes must fit.
  auto bytesFit = [](Type type) {
    auto tensor = cast<RankedTensorType>(type);
    return (elementCount(tensor) * elementBytes(tensor.getElementType())).get().has_value();
  };
  // A block is all f32 or all bf16 (the contract of the runtime's entry
  // points): the first argument, or result, sets which.
  Type blockElement;
  std::string blockElementFrom;
  auto checkTypes = [&](StringRef what, StringRef verb, TypeRange types) -> LogicalResult {
    for (auto [index, type] : llvm::enumerate(types)) {
      auto tensor = dyn_cast<RankedTensorType>(type);
      if (!tensor || !tensor.hasStaticShape() ||
          !(tensor.getElementType().isF32() || tensor.getElementType().isBF16()))
        return func.emitError() << what << " #" << index << " has type " << type
                                << "; htp entry points " << verb
                                << " static f32 or bf16 tensors only";
      if (!blockElement) {
        blockElement = tensor.getElementType();
        blockElementFrom = (what + " #" + Twine(index)).str();
      } else if (tensor.getElementType() != blockElement) {
        return func.emitError() << what << " #" << index << " has element type "
                                << dtypeName(tensor.getElementType()) << " but "
                                << blockElementFrom << " has " << dtypeName(blockElement)
                                << "; an htp block is all f32 or all bf16";
      }
      if (!bytesFit(type))
        return func.emitError() << what << " #" << index << " of type " << type
                                << " has more bytes than int64 holds";
    }
    return success();
  };
  if (failed(checkTypes("argument", "take", func.getArgumentTypes())) ||
      failed(checkTypes("result", "return", func.getResultTypes())))
    return failure();
  if (!func.getBody().hasOneBlock())
    return func.emitError("htp entry points must be a single block (no control flow)");
  for (Operation &op : func.getBody().front()) {
    if (isa<func::ReturnOp>(op) || isa_and_nonnull<HTPDialect>(op.getDialect()))
      continue;
    return op.emitOpError("is not an htp op: only htp ops and func.return may appear in an "
                          "htp entry point");
  }
  for (Operation &op : func.getBody().front().without_terminator())
    for (Value value : llvm::concat<Value>(op.getOperands(), op.getResults()))
      if (!bytesFit(value.getType()))
        return op.emitOpError() << "operand or result of type " << value.getType()
                                << " has more bytes than int64 holds";
  return success();
}

LogicalResult htp::checkWorkspaceOverlaps(func::FuncOp func) {
  Block &body = func.getBody().front();
  llvm::DenseMap<Operation *, unsigned> position; // the return is last
  for (auto [index, op] : llvm::enumerate(body))
    position[&op] = index;

  /// A byte range of the workspace and the ops between which it is live.
  struct Range {
    int64_t begin, end;
    unsigned first, last;
    Operation *op;
    int result; ///< the result's number, or -1 for kernel scratch
  };
  SmallVector<Range> ranges; // by `first`: results and scratch in op order
  for (Operation &op : body.without_terminator()) {
    unsigned at = position.lookup(&op);
    for (OpResult result : op.getResults()) {
      std::optional<int64_t> offset = workspaceOffset(&op, result.getResultNumber());
      if (!offset)
        continue;
      unsigned last = at; // a value never read is live while its op runs
      for (Operation *user : result.getUsers())
        last = std::max(last, position.lookup(user));
      ranges.push_back({*offset, *offset + byteSize(result), at, last, &op,
                        static_cast<int>(result.getResultNumber())});
    }
    std::optional<int64_t> scratch = scratchBytes(&op);
    auto offset = op.getAttrOfType<IntegerAttr>(kScratchOffsetAttrName);
    if (scratch && *scratch && offset)
      ranges.push_back({offset.getInt(), offset.getInt() + *scratch, at, at, &op, -1});
  }

  // A sweep in op order: `live` holds the ranges whose value may still be read.
  SmallVector<Range> live;
  for (const Range &range : ranges) {
    llvm::erase_if(live, [&](const Range &other) { return other.last < range.first; });
    for (const Range &other : live) {
      if (other.begin >= range.end || range.begin >= other.end)
        continue;
      auto what = [](const Range &r) -> std::string {
        if (r.result < 0)
          return "kernel scratch";
        return r.op->getNumResults() == 1 ? "result" : "result #" + std::to_string(r.result);
      };
      InFlightDiagnostic diag = range.op->emitOpError()
                                << "its " << what(range) << " at bytes [" << range.begin << ", "
                                << range.end << ") of the workspace overlaps ";
      if (other.op == range.op)
        diag << "its own " << what(other) << " at bytes [" << other.begin << ", " << other.end
             << "), live while it runs";
      else
        diag << "the " << what(other) << " of '" << other.op->getName() << "' at bytes ["
             << other.begin << ", " << other.end << "), which is still live (read by this op "
             << "or a later one)";
      diag.attachNote(other.op->getLoc())
          << "the overlapped " << what(other) << " is that of this '" << other.op->getName()
          << "'";
      return diag;
    }
    live.push_back(range);
  }
  return success();
}
