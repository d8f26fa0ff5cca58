//===- OpLowerings.cpp - One lowering pattern per htp op ------------------===//
//
// This file implements the patterns of --htp-lower-to-runtime: each htp op
// becomes a call of libhtprt (runtime/htp_ops.h; the all-reduce runtime/htp.h)
// with the rank's context first:
// its op entry point (htp_op_*_f32 or, on bf16 tensors, htp_op_*_bf16,
// which dispatches through the context's kernel table, so the block names
// no device-specific kernel), a balance
// hook or the all-reduce, on the pointers of its operands and of its result
// (its workspace slot or its result buffer, as --htp-assign-workspace
// placed it). Every call's status is checked: a failure leaves the entry at
// once. func.return copies what was not computed in place (htp_op_copy: the
// buffers may live on a device) and returns HTP_OK. Sizes come from the
// static shapes, which the lowering checked.
//
//===----------------------------------------------------------------------===//

#include "passes/OpLowerings.h"

#include "passes/EntryFunction.h"

#include "dialect/HTPOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace mlir::htp;

namespace {

Value constantI64(OpBuilder &builder, Location loc, int64_t value) {
  return LLVM::ConstantOp::create(builder, loc, builder.getI64Type(), value);
}

Value constantI32(OpBuilder &builder, Location loc, int64_t value) {
  return LLVM::ConstantOp::create(builder, loc, builder.getI32Type(), value);
}

/// A pointer `offset` bytes into the workspace.
Value workspaceSlot(OpBuilder &builder, Location loc, Value workspace, int64_t offset) {
  return LLVM::GEPOp::create(builder, loc, LLVM::LLVMPointerType::get(builder.getContext()),
                             builder.getI8Type(), workspace,
                             ArrayRef<LLVM::GEPArg>{constantI64(builder, loc, offset)});
}

/// The converted pointer of an optional operand, or null (a missing bias).
Value optionalPointer(OpBuilder &builder, Location loc, Value converted) {
  if (converted)
    return converted;
  return LLVM::ZeroOp::create(builder, loc, LLVM::LLVMPointerType::get(builder.getContext()));
}

/// The runtime's entry point `base`_f32 or `base`_bf16 for the element
/// type `op` computes on (runtime/htp_ops.h: the bf16 twins take the same
/// arguments, with bf16 pointers).
std::string opEntryPoint(StringRef base, Operation *op) {
  return (base + "_" + dtypeName(opElementType(op))).str();
}

/// 1 when a GELU (or an MLP's GELU) uses the tanh approximation: the
/// kernels' int flag.
template <typename OpTy>
int64_t tanhFlag(OpTy op) {
  return op.getApproximate() == Approximation::Tanh ? 1 : 0;
}

/// The base of the patterns: they share the entry's context.
template <typename OpTy>
struct EntryPattern : OpConversionPattern<OpTy> {
  EntryPattern(const TypeConverter &converter, EntryContext &entry)
      : OpConversionPattern<OpTy>(converter, entry.module.getContext()), entry(entry) {}

protected:
  EntryContext &entry;
};

/// The base of the op patterns: an op becomes one call that writes its
/// result where it was placed, and the op's result becomes that pointer.
template <typename OpTy>
struct CallPattern : EntryPattern<OpTy> {
  using EntryPattern<OpTy>::EntryPattern;
  using OpAdaptor = typename EntryPattern<OpTy>::OpAdaptor;

  LogicalResult matchAndRewrite(OpTy op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const final {
    Value result = this->entry.resultPointer(rewriter, op);
    emitCall(op, adaptor, rewriter, result);
    rewriter.replaceOp(op, result);
    return success();
  }

  /// Emits the call computing `op` into `result`.
  virtual void emitCall(OpTy op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                        Value result) const = 0;
};

/// The base of the patterns of multi-result ops: one call writes every
/// result where it was placed (an unused result too: the kernel writes it);
/// the op's results become those pointers.
template <typename OpTy>
struct MultiCallPattern : EntryPattern<OpTy> {
  using EntryPattern<OpTy>::EntryPattern;
  using OpAdaptor = typename EntryPattern<OpTy>::OpAdaptor;

  LogicalResult matchAndRewrite(OpTy op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const final {
    SmallVector<Value> results;
    for (unsigned index = 0; index < op->getNumResults(); ++index)
      results.push_back(this->entry.resultPointer(rewriter, op, index));
    emitCall(op, adaptor, rewriter, results);
    rewriter.replaceOp(op, results);
    return success();
  }

  /// Emits the call computing `op` into `results`, one pointer per result.
  virtual void emitCall(OpTy op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                        ArrayRef<Value> results) const = 0;
};

/// A result pointer when the op has result `index`, else null (an optional
/// gradient not wanted).
Value optionalResult(OpBuilder &builder, Location loc, ArrayRef<Value> results,
                     unsigned index) {
  return optionalPointer(builder, loc, index < results.size() ? results[index] : Value());
}

/// The dims of `value`'s static shape.
ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// The trailing sizes of every attention entry point and hook, forward and
/// backward: batch, tokens, model_dim (the input's dims), num_heads,
/// head_dim.
SmallVector<Value> attentionDims(OpBuilder &builder, Location loc, Value input, int64_t heads,
                                 int64_t headDim) {
  ArrayRef<int64_t> shape = shapeOf(input);
  return {constantI64(builder, loc, shape[0]), constantI64(builder, loc, shape[1]),
          constantI64(builder, loc, shape[2]), constantI64(builder, loc, heads),
          constantI64(builder, loc, headDim)};
}

/// htp.linear → htp_op_linear_f32 or _bf16(ctx, x, w, b or null, y, rows, in, out);
/// with a fused `gelu`, htp_op_linear_gelu_f32 or _bf16(..., out, tanh); with a
/// fused `residual` r, htp_op_linear_residual_f32 or _bf16(ctx, x, w, b or null,
/// r, y, rows, in, out).
struct LinearLowering : CallPattern<LinearOp> {
  using CallPattern::CallPattern;
  void emitCall(LinearOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    auto weight = cast<RankedTensorType>(op.getWeight().getType());
    SmallVector<Value> args{adaptor.getInput(), adaptor.getWeight(),
                            optionalPointer(rewriter, loc, adaptor.getBias()), result,
                            constantI64(rewriter, loc, leadingRows(op.getType())),
                            constantI64(rewriter, loc, weight.getDimSize(1)),
                            constantI64(rewriter, loc, weight.getDimSize(0))};
    if (op.getResidual()) {
      args.insert(args.begin() + 3, adaptor.getResidual());
      entry.callOp(rewriter, loc, opEntryPoint("htp_op_linear_residual", op), args);
      return;
    }
    std::optional<Approximation> gelu = op.getGelu();
    if (!gelu) {
      entry.callOp(rewriter, loc, opEntryPoint("htp_op_linear", op), args);
      return;
    }
    args.push_back(constantI32(rewriter, loc, *gelu == Approximation::Tanh ? 1 : 0));
    entry.callOp(rewriter, loc, opEntryPoint("htp_op_linear_gelu", op), args);
  }
};

/// htp.attention → htp_op_attention_f32 or _bf16 (with the scratch's size
/// in floats: f32 scratch in both; with a fused `residual` r,
/// htp_op_attention_residual_f32 or _bf16 with r after the proj bias), or
/// with a `pair` the balance hook
/// htp_rt_attention_f32 or _bf16 (the heads the plan gives this rank; no
/// proj bias; f32 scratch in both).
struct AttentionLowering : CallPattern<AttentionOp> {
  using CallPattern::CallPattern;
  void emitCall(AttentionOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    Value scratch = entry.scratchPointer(rewriter, op);
    auto dims = [&] {
      return attentionDims(rewriter, loc, op.getInput(), op.getNumHeads(), op.getHeadDim());
    };
    if (std::optional<uint64_t> pair = op.getPair()) {
      SmallVector<Value> args{entry.rtContext,      constantI32(rewriter, loc, *pair),
                              adaptor.getInput(),   adaptor.getQkvWeight(),
                              adaptor.getQkvBias(), adaptor.getProjWeight(),
                              result,               scratch};
      args.append(dims());
      entry.returnIfFailed(rewriter,
                           entry.callRuntime(rewriter, loc,
                                             opEntryPoint("htp_rt_attention", op), args));
    } else {
      // checkEntryFunction made sure the scratch's size fits.
      int64_t scratchFloats = *scratchBytes(op) / static_cast<int64_t>(sizeof(float));
      SmallVector<Value> args{adaptor.getInput(),
                              adaptor.getQkvWeight(),
                              adaptor.getQkvBias(),
                              adaptor.getProjWeight(),
                              optionalPointer(rewriter, loc, adaptor.getProjBias()),
                              result,
                              scratch,
                              constantI64(rewriter, loc, scratchFloats)};
      args.append(dims());
      if (op.getResidual()) {
        args.insert(args.begin() + 5, adaptor.getResidual());
        entry.callOp(rewriter, loc, opEntryPoint("htp_op_attention_residual", op), args);
        return;
      }
      entry.callOp(rewriter, loc, opEntryPoint("htp_op_attention", op), args);
    }
  }
};

/// htp.layer_norm → htp_op_layer_norm_f32 or _bf16(ctx, x, weight, bias, y, rows,
/// dim, eps); eps is an f32 for both. With a group, the collective
/// htp_group_layer_norm_f32 or _bf16, same arguments (its ranks share the rows).
struct LayerNormLowering : CallPattern<LayerNormOp> {
  using CallPattern::CallPattern;
  void emitCall(LayerNormOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    Value epsilon =
        LLVM::ConstantOp::create(rewriter, loc, rewriter.getF32Type(), op.getEpsilonAttr());
    entry.callOp(rewriter, loc,
                 op.getGroup() ? opEntryPoint("htp_group_layer_norm", op)
                               : opEntryPoint("htp_op_layer_norm", op),
                     {adaptor.getInput(), adaptor.getWeight(), adaptor.getBias(), result,
                      constantI64(rewriter, loc, leadingRows(op.getType())),
                      constantI64(rewriter, loc, op.getType().getShape().back()), epsilon});
  }
};

/// htp.gelu → htp_op_gelu_f32 or _bf16(ctx, x, y, count, tanh).
struct GeluLowering : CallPattern<GeluOp> {
  using CallPattern::CallPattern;
  void emitCall(GeluOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    Value tanhApprox = constantI32(rewriter, loc, tanhFlag(op));
    entry.callOp(rewriter, loc, opEntryPoint("htp_op_gelu", op),
                     {adaptor.getInput(), result,
                      constantI64(rewriter, loc, op.getType().getNumElements()), tanhApprox});
  }
};

/// htp.add → htp_op_add_f32 or _bf16(ctx, lhs, rhs, y, count).
struct AddLowering : CallPattern<AddOp> {
  using CallPattern::CallPattern;
  void emitCall(AddOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    entry.callOp(rewriter, loc, opEntryPoint("htp_op_add", op),
                     {adaptor.getLhs(), adaptor.getRhs(), result,
                      constantI64(rewriter, loc, op.getType().getNumElements())});
  }
};

/// htp.mlp → the balance hook htp_rt_mlp_f32 or _bf16 (the units the plan
/// gives this rank; f32 scratch in both).
struct MLPLowering : CallPattern<MLPOp> {
  using CallPattern::CallPattern;
  void emitCall(MLPOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    int64_t hidden = cast<RankedTensorType>(op.getFc1Weight().getType()).getDimSize(0);
    Value scratch = entry.scratchPointer(rewriter, op);
    Value status = entry.callRuntime(
        rewriter, loc, opEntryPoint("htp_rt_mlp", op),
        {entry.rtContext, constantI32(rewriter, loc, op.getPair()), adaptor.getInput(),
         adaptor.getFc1Weight(), optionalPointer(rewriter, loc, adaptor.getFc1Bias()),
         adaptor.getFc2Weight(), result, scratch,
         constantI64(rewriter, loc, leadingRows(op.getType())),
         constantI64(rewriter, loc, op.getType().getShape().back()),
         constantI64(rewriter, loc, hidden), constantI64(rewriter, loc, op.getUnitWidth()),
         constantI32(rewriter, loc, tanhFlag(op))});
    entry.returnIfFailed(rewriter, status);
  }
};

/// htp.bias_add → htp_op_bias_add_f32 or _bf16(ctx, x, bias, y, rows, dim);
/// with a fused `residual` r, htp_op_bias_add_residual_f32 or _bf16(ctx, x,
/// bias, r, y, rows, dim).
struct BiasAddLowering : CallPattern<BiasAddOp> {
  using CallPattern::CallPattern;
  void emitCall(BiasAddOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    SmallVector<Value> args{adaptor.getInput(), adaptor.getBias(), result,
                            constantI64(rewriter, loc, leadingRows(op.getType())),
                            constantI64(rewriter, loc, op.getType().getShape().back())};
    if (op.getResidual()) {
      args.insert(args.begin() + 2, adaptor.getResidual());
      entry.callOp(rewriter, loc, opEntryPoint("htp_op_bias_add_residual", op), args);
      return;
    }
    entry.callOp(rewriter, loc, opEntryPoint("htp_op_bias_add", op), args);
  }
};

/// htp.all_reduce → htp_allreduce_sum_f32 or _bf16(ctx, x, y, count), or with a
/// bias or residual htp_allreduce_sum_bias_residual_*(ctx, x, b, r, y, rows, cols)
/// (null for the one it lacks); a failure (a peer hung or died) is returned
/// from the entry at once.
struct AllReduceLowering : CallPattern<AllReduceOp> {
  using CallPattern::CallPattern;
  void emitCall(AllReduceOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    if (op.getBias() || op.getResidual()) {
      entry.callOp(rewriter, loc, opEntryPoint("htp_allreduce_sum_bias_residual", op),
                   {adaptor.getInput(), optionalPointer(rewriter, loc, adaptor.getBias()),
                    optionalPointer(rewriter, loc, adaptor.getResidual()), result,
                    constantI64(rewriter, loc, leadingRows(op.getType())),
                    constantI64(rewriter, loc, op.getType().getShape().back())});
      return;
    }
    Value status = entry.callRuntime(
        rewriter, loc, opEntryPoint("htp_allreduce_sum", op),
        {entry.rtContext, adaptor.getInput(), result,
         constantI64(rewriter, loc, op.getType().getNumElements())});
    entry.returnIfFailed(rewriter, status);
  }
};

/// htp.all_reduce_norm → htp_allreduce_sum_norm_f32 or _bf16(ctx, x, b, r, sum,
/// weight, norm_bias, normed, rows, cols, epsilon): the all-reduce's sum (b and r
/// null where it has none) and its layer norm.
struct AllReduceNormLowering : MultiCallPattern<AllReduceNormOp> {
  using MultiCallPattern::MultiCallPattern;
  void emitCall(AllReduceNormOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                ArrayRef<Value> results) const override {
    Location loc = op.getLoc();
    Value epsilon =
        LLVM::ConstantOp::create(rewriter, loc, rewriter.getF32Type(), op.getEpsilonAttr());
    entry.callOp(rewriter, loc, opEntryPoint("htp_allreduce_sum_norm", op),
                 {adaptor.getInput(), optionalPointer(rewriter, loc, adaptor.getBias()),
                  optionalPointer(rewriter, loc, adaptor.getResidual()), results[0],
                  adaptor.getWeight(), adaptor.getNormBias(), results[1],
                  constantI64(rewriter, loc, leadingRows(op.getSum().getType())),
                  constantI64(rewriter, loc, op.getSum().getType().getShape().back()), epsilon});
  }
};

//===----------------------------------------------------------------------===//
// Training ops (f32 only, which the dialect checked): one htp_op_*_f32 each
//===----------------------------------------------------------------------===//

/// The image dims and the patch's of htp.patch_embed and its gradient:
/// batch, channels, height, width, patch, dim.
SmallVector<Value> patchDims(OpBuilder &builder, Location loc, Value images, int64_t patch,
                             int64_t dim) {
  ArrayRef<int64_t> shape = shapeOf(images);
  return {constantI64(builder, loc, shape[0]), constantI64(builder, loc, shape[1]),
          constantI64(builder, loc, shape[2]), constantI64(builder, loc, shape[3]),
          constantI64(builder, loc, patch), constantI64(builder, loc, dim)};
}

/// The scratch's size in floats (checkEntryFunction made sure it fits).
int64_t scratchFloats(Operation *op) {
  return *scratchBytes(op) / static_cast<int64_t>(sizeof(float));
}

/// htp.patch_embed → htp_op_patch_embed_f32(ctx, images, w, b, y, scratch,
/// scratch_floats, batch, channels, height, width, patch, dim).
struct PatchEmbedLowering : CallPattern<PatchEmbedOp> {
  using CallPattern::CallPattern;
  void emitCall(PatchEmbedOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    SmallVector<Value> args{adaptor.getImages(), adaptor.getWeight(), adaptor.getBias(), result,
                            entry.scratchPointer(rewriter, op),
                            constantI64(rewriter, loc, scratchFloats(op))};
    args.append(patchDims(rewriter, loc, op.getImages(), op.getPatch(),
                          shapeOf(op.getResult()).back()));
    entry.callOp(rewriter, loc, "htp_op_patch_embed_f32", args);
  }
};

/// htp.embed_tokens → htp_op_embed_tokens_f32(ctx, patches, cls, pos, y,
/// batch, patches_per_image, dim).
struct EmbedTokensLowering : CallPattern<EmbedTokensOp> {
  using CallPattern::CallPattern;
  void emitCall(EmbedTokensOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    ArrayRef<int64_t> patches = shapeOf(op.getPatches());
    entry.callOp(rewriter, loc, "htp_op_embed_tokens_f32",
                 {adaptor.getPatches(), adaptor.getCls(), adaptor.getPos(), result,
                  constantI64(rewriter, loc, patches[0]), constantI64(rewriter, loc, patches[1]),
                  constantI64(rewriter, loc, patches[2])});
  }
};

/// htp.cls_token → htp_op_cls_token_f32(ctx, x, y, batch, tokens, dim).
struct ClsTokenLowering : CallPattern<ClsTokenOp> {
  using CallPattern::CallPattern;
  void emitCall(ClsTokenOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    ArrayRef<int64_t> input = shapeOf(op.getInput());
    entry.callOp(rewriter, loc, "htp_op_cls_token_f32",
                 {adaptor.getInput(), result, constantI64(rewriter, loc, input[0]),
                  constantI64(rewriter, loc, input[1]), constantI64(rewriter, loc, input[2])});
  }
};

/// htp.cross_entropy → htp_op_cross_entropy_f32(ctx, logits, targets, loss,
/// rows, classes).
struct CrossEntropyLowering : CallPattern<CrossEntropyOp> {
  using CallPattern::CallPattern;
  void emitCall(CrossEntropyOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    ArrayRef<int64_t> logits = shapeOf(op.getLogits());
    entry.callOp(rewriter, loc, "htp_op_cross_entropy_f32",
                 {adaptor.getLogits(), adaptor.getTargets(), result,
                  constantI64(rewriter, loc, logits[0]), constantI64(rewriter, loc, logits[1])});
  }
};

/// htp.cross_entropy_grad → htp_op_cross_entropy_backward_f32(ctx, logits,
/// targets, dlogits, rows, classes).
struct CrossEntropyGradLowering : CallPattern<CrossEntropyGradOp> {
  using CallPattern::CallPattern;
  void emitCall(CrossEntropyGradOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    ArrayRef<int64_t> logits = shapeOf(op.getLogits());
    entry.callOp(rewriter, loc, "htp_op_cross_entropy_backward_f32",
                 {adaptor.getLogits(), adaptor.getTargets(), result,
                  constantI64(rewriter, loc, logits[0]), constantI64(rewriter, loc, logits[1])});
  }
};

/// htp.linear_grad → htp_op_linear_backward_f32(ctx, x, w, dy, dx, dw, db or
/// null, rows, in, out).
struct LinearGradLowering : MultiCallPattern<LinearGradOp> {
  using MultiCallPattern::MultiCallPattern;
  void emitCall(LinearGradOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                ArrayRef<Value> results) const override {
    Location loc = op.getLoc();
    ArrayRef<int64_t> weight = shapeOf(op.getWeight());
    entry.callOp(rewriter, loc, "htp_op_linear_backward_f32",
                 {adaptor.getInput(), adaptor.getWeight(), adaptor.getDy(), results[0],
                  results[1], optionalResult(rewriter, loc, results, 2),
                  constantI64(rewriter, loc, leadingRows(op.getDx().getType())),
                  constantI64(rewriter, loc, weight[1]), constantI64(rewriter, loc, weight[0])});
  }
};

/// htp.layer_norm_grad → htp_op_layer_norm_backward_f32(ctx, x, gamma, dy,
/// dx, dgamma, dbeta, rows, dim, eps).
struct LayerNormGradLowering : MultiCallPattern<LayerNormGradOp> {
  using MultiCallPattern::MultiCallPattern;
  void emitCall(LayerNormGradOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                ArrayRef<Value> results) const override {
    Location loc = op.getLoc();
    auto input = cast<RankedTensorType>(op.getInput().getType());
    Value epsilon =
        LLVM::ConstantOp::create(rewriter, loc, rewriter.getF32Type(), op.getEpsilonAttr());
    entry.callOp(rewriter, loc, "htp_op_layer_norm_backward_f32",
                 {adaptor.getInput(), adaptor.getWeight(), adaptor.getDy(), results[0],
                  results[1], results[2], constantI64(rewriter, loc, leadingRows(input)),
                  constantI64(rewriter, loc, input.getShape().back()), epsilon});
  }
};

/// htp.gelu_grad → htp_op_gelu_backward_f32(ctx, x, dy, dx, count, tanh).
struct GeluGradLowering : CallPattern<GeluGradOp> {
  using CallPattern::CallPattern;
  void emitCall(GeluGradOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    entry.callOp(rewriter, loc, "htp_op_gelu_backward_f32",
                 {adaptor.getInput(), adaptor.getDy(), result,
                  constantI64(rewriter, loc, op.getDx().getType().getNumElements()),
                  constantI32(rewriter, loc, tanhFlag(op))});
  }
};

/// htp.attention_grad → htp_op_attention_backward_f32(ctx, x, wqkv, bqkv,
/// wproj, dy, dx, dwqkv, dbqkv, dwproj, dbproj or null, scratch,
/// scratch_floats, batch, tokens, model_dim, num_heads, head_dim), or with a
/// `pair` the backward hook htp_rt_attention_grad_f32(ctx, pair, x, wqkv,
/// bqkv, wproj, dy, dx, dwqkv, dbqkv, dwproj, scratch, batch, tokens,
/// model_dim, num_heads, head_dim) (no proj bias, as the forward hook's).
struct AttentionGradLowering : MultiCallPattern<AttentionGradOp> {
  using MultiCallPattern::MultiCallPattern;
  void emitCall(AttentionGradOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                ArrayRef<Value> results) const override {
    Location loc = op.getLoc();
    if (std::optional<uint64_t> pair = op.getPair()) {
      SmallVector<Value> args{entry.rtContext,      constantI32(rewriter, loc, *pair),
                              adaptor.getInput(),   adaptor.getQkvWeight(),
                              adaptor.getQkvBias(), adaptor.getProjWeight(),
                              adaptor.getDy(),      results[0],
                              results[1],           results[2],
                              results[3],           entry.scratchPointer(rewriter, op)};
      args.append(
          attentionDims(rewriter, loc, op.getInput(), op.getNumHeads(), op.getHeadDim()));
      entry.returnIfFailed(rewriter,
                           entry.callRuntime(rewriter, loc, "htp_rt_attention_grad_f32", args));
      return;
    }
    SmallVector<Value> args{adaptor.getInput(),
                            adaptor.getQkvWeight(),
                            adaptor.getQkvBias(),
                            adaptor.getProjWeight(),
                            adaptor.getDy(),
                            results[0],
                            results[1],
                            results[2],
                            results[3],
                            optionalResult(rewriter, loc, results, 4),
                            entry.scratchPointer(rewriter, op),
                            constantI64(rewriter, loc, scratchFloats(op))};
    args.append(attentionDims(rewriter, loc, op.getInput(), op.getNumHeads(), op.getHeadDim()));
    entry.callOp(rewriter, loc, "htp_op_attention_backward_f32", args);
  }
};

/// htp.mlp_grad → the backward hook htp_rt_mlp_grad_f32(ctx, pair, x, w1,
/// b1 or null, w2, dy, dx, dw1, db1 or null, dw2, scratch, rows, model_dim,
/// hidden_dim, unit_width, tanh).
struct MLPGradLowering : MultiCallPattern<MLPGradOp> {
  using MultiCallPattern::MultiCallPattern;
  void emitCall(MLPGradOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                ArrayRef<Value> results) const override {
    Location loc = op.getLoc();
    auto input = cast<RankedTensorType>(op.getInput().getType());
    Value status = entry.callRuntime(
        rewriter, loc, "htp_rt_mlp_grad_f32",
        {entry.rtContext, constantI32(rewriter, loc, op.getPair()), adaptor.getInput(),
         adaptor.getFc1Weight(), optionalPointer(rewriter, loc, adaptor.getFc1Bias()),
         adaptor.getFc2Weight(), adaptor.getDy(), results[0], results[1],
         optionalResult(rewriter, loc, results, 3), results[2],
         entry.scratchPointer(rewriter, op), constantI64(rewriter, loc, leadingRows(input)),
         constantI64(rewriter, loc, input.getShape().back()),
         constantI64(rewriter, loc, shapeOf(op.getFc1Weight())[0]),
         constantI64(rewriter, loc, op.getUnitWidth()),
         constantI32(rewriter, loc, tanhFlag(op))});
    entry.returnIfFailed(rewriter, status);
  }
};

/// htp.row_sum → htp_op_row_sum_f32(ctx, x, y, rows, cols).
struct RowSumLowering : CallPattern<RowSumOp> {
  using CallPattern::CallPattern;
  void emitCall(RowSumOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    auto input = cast<RankedTensorType>(op.getInput().getType());
    entry.callOp(rewriter, loc, "htp_op_row_sum_f32",
                 {adaptor.getInput(), result, constantI64(rewriter, loc, leadingRows(input)),
                  constantI64(rewriter, loc, input.getShape().back())});
  }
};

/// htp.patch_embed_grad → htp_op_patch_embed_backward_f32(ctx, images, dy,
/// dw, db, scratch, scratch_floats, batch, channels, height, width, patch,
/// dim).
struct PatchEmbedGradLowering : MultiCallPattern<PatchEmbedGradOp> {
  using MultiCallPattern::MultiCallPattern;
  void emitCall(PatchEmbedGradOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                ArrayRef<Value> results) const override {
    Location loc = op.getLoc();
    SmallVector<Value> args{adaptor.getImages(), adaptor.getDy(), results[0], results[1],
                            entry.scratchPointer(rewriter, op),
                            constantI64(rewriter, loc, scratchFloats(op))};
    args.append(patchDims(rewriter, loc, op.getImages(), op.getPatch(),
                          shapeOf(op.getDy()).back()));
    entry.callOp(rewriter, loc, "htp_op_patch_embed_backward_f32", args);
  }
};

/// htp.embed_tokens_grad → htp_op_embed_tokens_backward_f32(ctx, dy,
/// dpatches, dcls, dpos, batch, patches_per_image, dim).
struct EmbedTokensGradLowering : MultiCallPattern<EmbedTokensGradOp> {
  using MultiCallPattern::MultiCallPattern;
  void emitCall(EmbedTokensGradOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                ArrayRef<Value> results) const override {
    Location loc = op.getLoc();
    ArrayRef<int64_t> dy = shapeOf(op.getDy());
    entry.callOp(rewriter, loc, "htp_op_embed_tokens_backward_f32",
                 {adaptor.getDy(), results[0], results[1], results[2],
                  constantI64(rewriter, loc, dy[0]), constantI64(rewriter, loc, dy[1] - 1),
                  constantI64(rewriter, loc, dy[2])});
  }
};

/// htp.cls_token_grad → htp_op_cls_token_backward_f32(ctx, dy, dx, batch,
/// tokens, dim).
struct ClsTokenGradLowering : CallPattern<ClsTokenGradOp> {
  using CallPattern::CallPattern;
  void emitCall(ClsTokenGradOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    ArrayRef<int64_t> dx = shapeOf(op.getDx());
    entry.callOp(rewriter, loc, "htp_op_cls_token_backward_f32",
                 {adaptor.getDy(), result, constantI64(rewriter, loc, dx[0]),
                  constantI64(rewriter, loc, dx[1]), constantI64(rewriter, loc, dx[2])});
  }
};

/// htp.zeros_like → htp_op_cls_token_backward_f32(ctx, input, scratch, 1,
/// 2, n), then htp_op_copy(ctx, result, scratch + n, 4n). The runtime has
/// no fill entry point, and cls_token's adjoint writes exact zeros past
/// token 0 on every device: with one image of two tokens of n channels,
/// token 1 of the scratch is n zeros (token 0, a copy of the input, is
/// not used).
struct ZerosLikeLowering : CallPattern<ZerosLikeOp> {
  using CallPattern::CallPattern;
  void emitCall(ZerosLikeOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter,
                Value result) const override {
    Location loc = op.getLoc();
    // checkEntryFunction made sure the bytes fit.
    const int64_t elements = *elementCount(cast<RankedTensorType>(op.getType())).get();
    Value scratch = entry.scratchPointer(rewriter, op);
    entry.callOp(rewriter, loc, "htp_op_cls_token_backward_f32",
                 {adaptor.getInput(), scratch, constantI64(rewriter, loc, 1),
                  constantI64(rewriter, loc, 2), constantI64(rewriter, loc, elements)});
    Value zeros = LLVM::GEPOp::create(rewriter, loc, scratch.getType(), rewriter.getF32Type(),
                                      scratch,
                                      ArrayRef<LLVM::GEPArg>{constantI64(rewriter, loc, elements)});
    entry.callOp(rewriter, loc, "htp_op_copy",
                 {result, zeros, constantI64(rewriter, loc, byteSize(op.getResult()))});
  }
};

/// func.return → copies of the results not computed in place (a returned
/// argument, a value returned twice) by htp_op_copy, each checked, then
/// `return 0` (HTP_OK).
struct ReturnLowering : EntryPattern<func::ReturnOp> {
  using EntryPattern::EntryPattern;
  LogicalResult matchAndRewrite(func::ReturnOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    for (auto [index, pointer] : llvm::enumerate(adaptor.getOperands())) {
      if (!entry.copyResult[index])
        continue;
      entry.callOp(rewriter, loc, "htp_op_copy",
                   {entry.buffers[entry.numArgs + index], pointer,
                    constantI64(rewriter, loc, byteSize(op.getOperand(index)))});
    }
    rewriter.replaceOpWithNewOp<LLVM::ReturnOp>(op, ValueRange{constantI32(rewriter, loc, 0)});
    return success();
  }
};

} // namespace

Value EntryContext::resultPointer(OpBuilder &builder, Operation *op, unsigned index) {
  if (std::optional<int64_t> offset = workspaceOffset(op, index))
    return workspaceSlot(builder, op->getLoc(), workspace(), *offset);
  return buffers[resultBuffer.lookup(op->getResult(index))];
}

Value EntryContext::scratchPointer(OpBuilder &builder, Operation *op) {
  auto offset = op->getAttrOfType<IntegerAttr>(kScratchOffsetAttrName);
  return workspaceSlot(builder, op->getLoc(), workspace(), offset.getInt());
}

LLVM::LLVMFuncOp EntryContext::declareFunction(OpBuilder &builder, StringRef name, Type result,
                                               ValueRange args) {
  if (auto function = module.lookupSymbol<LLVM::LLVMFuncOp>(name))
    return function;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(module.getBody());
  auto type = LLVM::LLVMFunctionType::get(result, llvm::to_vector(args.getTypes()));
  return LLVM::LLVMFuncOp::create(builder, module.getLoc(), name, type);
}

void EntryContext::callOp(RewriterBase &rewriter, Location loc, StringRef name,
                          ValueRange args) {
  SmallVector<Value> withContext{rtContext};
  withContext.append(args.begin(), args.end());
  returnIfFailed(rewriter, callRuntime(rewriter, loc, name, withContext));
}

Value EntryContext::callRuntime(OpBuilder &builder, Location loc, StringRef name,
                                ValueRange args) {
  auto function = declareFunction(builder, name, builder.getI32Type(), args);
  return LLVM::CallOp::create(builder, loc, function, args).getResult();
}

/// Marks a runtime call whose status branchOnFailures checks.
static constexpr llvm::StringLiteral kCheckedCall = "htp.checked_call";

void EntryContext::returnIfFailed(RewriterBase &rewriter, Value status) {
  cast<LLVM::CallOp>(status.getDefiningOp())->setAttr(kCheckedCall, rewriter.getUnitAttr());
}

void EntryContext::branchOnFailures(OpBuilder &builder) {
  SmallVector<LLVM::CallOp> calls; // in program order
  entry.walk([&](LLVM::CallOp call) {
    if (call->removeAttr(kCheckedCall))
      calls.push_back(call);
  });
  if (calls.empty())
    return;
  Region &body = entry.getBody();
  Location loc = entry.getLoc();
  OpBuilder::InsertionGuard guard(builder);
  Block *failureBlock = builder.createBlock(&body, body.end(), {builder.getI32Type()}, {loc});
  LLVM::ReturnOp::create(builder, loc, ValueRange{failureBlock->getArgument(0)});
  for (LLVM::CallOp call : llvm::reverse(calls)) {
    // What follows the call moves to a new block, between this one and the
    // failure exit.
    Block *current = call->getBlock();
    Block *next = current->splitBlock(std::next(Block::iterator(call)));
    builder.setInsertionPointToEnd(current);
    Value status = call.getResult();
    Value failed = LLVM::ICmpOp::create(builder, call.getLoc(), LLVM::ICmpPredicate::ne, status,
                                        constantI32(builder, call.getLoc(), 0));
    LLVM::CondBrOp::create(builder, call.getLoc(), failed, failureBlock, ValueRange{status},
                           next, ValueRange{});
  }
}

void htp::populateOpLoweringPatterns(RewritePatternSet &patterns,
                                     const TypeConverter &converter, EntryContext &entry) {
  patterns.add<LinearLowering, AttentionLowering, LayerNormLowering, GeluLowering, AddLowering,
               MLPLowering, BiasAddLowering, AllReduceLowering, AllReduceNormLowering,
               ReturnLowering>(converter,
                                                                                 entry);
  patterns.add<PatchEmbedLowering, EmbedTokensLowering, ClsTokenLowering, CrossEntropyLowering,
               CrossEntropyGradLowering, LinearGradLowering, LayerNormGradLowering,
               GeluGradLowering, AttentionGradLowering, MLPGradLowering, RowSumLowering,
               PatchEmbedGradLowering, EmbedTokensGradLowering, ClsTokenGradLowering,
               ZerosLikeLowering>(converter, entry);
}
