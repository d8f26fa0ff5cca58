//===- Grad.cpp - The backward function of an htp loss function -----------===//
//
// This file implements the htp-grad pass (DESIGN §11): for every function
// whose first result is an htp.cross_entropy loss it writes @NAME_grad,
// which runs the forward and then every op's adjoint in reverse order, and
// returns the original results followed by the loss's gradient with respect
// to each htp.param argument. Reverse mode over one block: each value's
// adjoint is the sum (htp.add) of what its uses contribute.
//
// On a function split by --htp-tensor-parallel the adjoints follow
// Megatron's conjugate pair: the forward's htp.all_reduce (g) is the
// identity in backward, and an op that reads a replicated input with
// sharded weights (a split attention, the column half of a split MLP: f)
// yields only this rank's part of that input's gradient, so the part is
// all-reduced. Replicated parameters (norms, the biases added after an
// all-reduce) then get identical gradients on every rank, and a sharded
// parameter's gradient is its shard's.
//
// It runs after --htp-balance-hooks, so a balanced forward's adjoints are
// balanced too: a hooked htp.attention (with a pair) gets an
// htp.attention_grad with the same pair, and an htp.mlp an htp.mlp_grad
// with its pair, unit width and GELU; the lowering turns both into the
// runtime's backward hooks, which differentiate the units the plan gave the
// rank in forward. Their input gradient is this rank's part, all-reduced
// as an unbalanced split op's.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::htp {
#define GEN_PASS_DEF_HTPGRAD
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

/// `func`'s htp.param arguments, in order: what gradients are returned for.
SmallVector<BlockArgument> paramsOf(func::FuncOp func) {
  SmallVector<BlockArgument> params;
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), kParamAttrName))
      params.push_back(arg);
  return params;
}

/// Writes the backward half of one @NAME_grad, whose body is still a copy
/// of the forward.
class AdjointBuilder {
public:
  AdjointBuilder(func::FuncOp func) : func(func), builder(func.getContext()) {}
  /// Adds the adjoints before the return and returns the gradients.
  LogicalResult run(SmallVectorImpl<Value> &gradients);

private:
  void accumulate(Value value, Value contribution);
  void accumulateInput(Operation *op, Value input, Value dx);
  Value allReduce(Value partial);
  bool readsShardOf(Operation *op, unsigned operandIndex,
                    std::optional<int64_t> dim);
  LogicalResult adjoint(Operation *op, Value dy);
  /// `op`'s operand `index` as a value whose type gives a result type.
  Type typeOf(Operation *op, unsigned index) {
    return op->getOperand(index).getType();
  }

  /// An adjoint op; attributes the forward op left unset (defaults) are
  /// left unset on it too.
  template <typename OpTy>
  Operation *create(Location loc, TypeRange results, ValueRange operands,
                    ArrayRef<NamedAttribute> attributes = {}) {
    SmallVector<NamedAttribute> set;
    for (NamedAttribute attribute : attributes)
      if (attribute.getValue())
        set.push_back(attribute);
    return OpTy::create(builder, loc, results, operands, set).getOperation();
  }

  func::FuncOp func;
  OpBuilder builder;
  llvm::DenseMap<Value, Value> adjoints;
  /// Values the loss reads through an operand that has no adjoint (the
  /// images of a patch embedding, the targets of the loss): the op and
  /// what the operand is, for the message when a parameter is one.
  llvm::DenseMap<Value, std::pair<Operation *, StringRef>> undifferentiated;
  bool split = false;
};

void AdjointBuilder::accumulate(Value value, Value contribution) {
  auto [it, inserted] = adjoints.try_emplace(value, contribution);
  if (!inserted)
    it->second = AddOp::create(builder, contribution.getLoc(),
                               contribution.getType(), it->second, contribution)
                     .getResult();
}

/// Adds `dx`, the gradient `op`'s adjoint yields for its replicated
/// `input`. When `op` is split with row-sharded weights (its operand 1
/// sharded along dim 0: a split attention, the column linear of a split
/// MLP, an htp.mlp), `dx` is this rank's part of it: all-reduced first
/// (Megatron's f).
void AdjointBuilder::accumulateInput(Operation *op, Value input, Value dx) {
  if (split && readsShardOf(op, 1, /*dim=*/0))
    dx = allReduce(dx);
  accumulate(input, dx);
}

Value AdjointBuilder::allReduce(Value partial) {
  return AllReduceOp::create(builder, partial.getLoc(), partial.getType(),
                             partial, /*bias=*/Value(), /*residual=*/Value(),
                             builder.getStringAttr("tp"))
      .getResult();
}

/// Whether operand `operandIndex` of `op` is a sharded argument (of dim
/// `dim`, when given): the mark of an op that --htp-tensor-parallel split.
bool AdjointBuilder::readsShardOf(Operation *op, unsigned operandIndex,
                                  std::optional<int64_t> dim) {
  ShardAttr shard = getArgumentShard(op->getOperand(operandIndex));
  return shard && (!dim || shard.getDim() == *dim);
}

/// Adds the adjoint of `op`, whose result's adjoint is `dy`, before the
/// builder's insertion point.
LogicalResult AdjointBuilder::adjoint(Operation *op, Value dy) {
  Location loc = op->getLoc();
  // The forward op's attribute of that name, which its adjoint takes too.
  auto attribute = [&](StringRef name) {
    return NamedAttribute(builder.getStringAttr(name), op->getAttr(name));
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](LinearOp linear) -> LogicalResult {
        // A fused GELU was taken apart above, except beside a residual
        // (which the verifier refuses).
        if (linear.getResidual())
          return linear.emitOpError("has a fused residual, which has no adjoint here: write "
                                    "htp.add after it (--htp-fuse-residual runs after "
                                    "--htp-grad)");
        SmallVector<Type> types{typeOf(op, 0), typeOf(op, 1)};
        if (linear.getBias())
          types.push_back(typeOf(op, 2));
        Operation *grad = create<LinearGradOp>(
            loc, types, ValueRange{linear.getInput(), linear.getWeight(), dy});
        // The column half of a split MLP reads the replicated input (f).
        accumulateInput(op, linear.getInput(), grad->getResult(0));
        accumulate(linear.getWeight(), grad->getResult(1));
        if (linear.getBias())
          accumulate(linear.getBias(), grad->getResult(2));
        return success();
      })
      .Case([&](AttentionOp attention) -> LogicalResult {
        if (attention.getResidual())
          return attention.emitOpError("has a fused residual, which has no adjoint here: "
                                       "write htp.add after it (--htp-fuse-residual runs "
                                       "after --htp-grad)");
        // A balanced attention (pair) has no proj bias: four results, and
        // the adjoint keeps the pair, so it runs the backward hook.
        SmallVector<Type> types{typeOf(op, 0), typeOf(op, 1), typeOf(op, 2),
                                typeOf(op, 3)};
        if (attention.getProjBias())
          types.push_back(typeOf(op, 4));
        Operation *grad = create<AttentionGradOp>(
            loc, types,
            ValueRange{attention.getInput(), attention.getQkvWeight(),
                       attention.getQkvBias(), attention.getProjWeight(), dy},
            {attribute("num_heads"), attribute("pair")});
        accumulateInput(op, attention.getInput(), grad->getResult(0));
        accumulate(attention.getQkvWeight(), grad->getResult(1));
        accumulate(attention.getQkvBias(), grad->getResult(2));
        accumulate(attention.getProjWeight(), grad->getResult(3));
        if (attention.getProjBias())
          accumulate(attention.getProjBias(), grad->getResult(4));
        return success();
      })
      .Case([&](MLPOp mlp) {
        // The balanced MLP pair as one adjoint: its units, as the forward's.
        SmallVector<Type> types{typeOf(op, 0), typeOf(op, 1), typeOf(op, 2)};
        SmallVector<Value> operands{mlp.getInput(), mlp.getFc1Weight(),
                                    mlp.getFc2Weight(), dy};
        if (mlp.getFc1Bias()) {
          types.push_back(mlp.getFc1Bias().getType());
          operands.push_back(mlp.getFc1Bias());
        }
        Operation *grad = create<MLPGradOp>(
            loc, types, operands,
            {attribute("approximate"), attribute("unit_width"),
             attribute("pair")});
        // fc1 reads the replicated input (f), as a split column linear.
        accumulateInput(op, mlp.getInput(), grad->getResult(0));
        accumulate(mlp.getFc1Weight(), grad->getResult(1));
        accumulate(mlp.getFc2Weight(), grad->getResult(2));
        if (mlp.getFc1Bias())
          accumulate(mlp.getFc1Bias(), grad->getResult(3));
        return success();
      })
      .Case([&](LayerNormOp norm) {
        Operation *grad = create<LayerNormGradOp>(
            loc, TypeRange{typeOf(op, 0), typeOf(op, 1), typeOf(op, 2)},
            ValueRange{norm.getInput(), norm.getWeight(), dy},
            {attribute("epsilon")});
        accumulate(norm.getInput(), grad->getResult(0));
        accumulate(norm.getWeight(), grad->getResult(1));
        accumulate(norm.getBias(), grad->getResult(2));
        return success();
      })
      .Case([&](GeluOp gelu) {
        Operation *grad = create<GeluGradOp>(loc, TypeRange{typeOf(op, 0)},
                                             ValueRange{gelu.getInput(), dy},
                                             {attribute("approximate")});
        accumulate(gelu.getInput(), grad->getResult(0));
        return success();
      })
      .Case([&](AddOp add) {
        accumulate(add.getLhs(), dy);
        accumulate(add.getRhs(), dy);
        return success();
      })
      .Case([&](BiasAddOp biasAdd) {
        accumulate(biasAdd.getInput(), dy);
        if (biasAdd.getResidual()) // y = x + b + r: r's adjoint is dy, as x's
          accumulate(biasAdd.getResidual(), dy);
        accumulate(
            biasAdd.getBias(),
            create<RowSumOp>(loc, TypeRange{typeOf(op, 1)}, ValueRange{dy})
                ->getResult(0));
        return success();
      })
      .Case([&](AllReduceOp reduce) { // g: the identity in backward
        accumulate(reduce.getInput(), dy);
        // y = sum + b + r: the replicated adds' adjoints, as htp.bias_add's
        if (reduce.getResidual())
          accumulate(reduce.getResidual(), dy);
        if (Value bias = reduce.getBias())
          accumulate(bias, create<RowSumOp>(loc, TypeRange{bias.getType()},
                                            ValueRange{dy})
                               ->getResult(0));
        return success();
      })
      .Case([&](PatchEmbedOp embed) {
        if (adjoints.count(embed.getImages()) ||
            !isa<BlockArgument>(embed.getImages()))
          return LogicalResult(embed.emitOpError(
              "embeds a computed value; --htp-grad differentiates patch "
              "embeddings of inputs only"));
        undifferentiated.try_emplace(embed.getImages(), op, "images");
        Operation *grad = create<PatchEmbedGradOp>(
            loc, TypeRange{typeOf(op, 1), typeOf(op, 2)},
            ValueRange{embed.getImages(), dy}, {attribute("patch")});
        accumulate(embed.getWeight(), grad->getResult(0));
        accumulate(embed.getBias(), grad->getResult(1));
        return success();
      })
      .Case([&](EmbedTokensOp embed) {
        Operation *grad = create<EmbedTokensGradOp>(
            loc, TypeRange{typeOf(op, 0), typeOf(op, 1), typeOf(op, 2)},
            ValueRange{dy});
        for (unsigned index = 0; index < 3; ++index)
          accumulate(op->getOperand(index), grad->getResult(index));
        return success();
      })
      .Case([&](ClsTokenOp cls) {
        accumulate(cls.getInput(),
                   create<ClsTokenGradOp>(loc, TypeRange{typeOf(op, 0)},
                                          ValueRange{dy})
                       ->getResult(0));
        return success();
      })
      .Default([&](Operation *other) {
        return LogicalResult(
            other->emitOpError("has no adjoint in --htp-grad"));
      });
}

LogicalResult AdjointBuilder::run(SmallVectorImpl<Value> &gradients) {
  split = func->hasAttr(kTPAttrName);
  Block &body = func.getBody().front();
  Operation *terminator = body.getTerminator();
  auto loss = cast<CrossEntropyOp>(terminator->getOperand(0).getDefiningOp());
  builder.setInsertionPoint(terminator);

  // A linear with its GELU fused (written so: the fusion runs after this
  // pass) computes GELU(h) without keeping h, which the GELU's adjoint
  // reads: this copy computes h and the GELU apart (a split block's fc1
  // reaches here as htp.mlp, which keeps it).
  for (LinearOp linear : llvm::to_vector(body.getOps<LinearOp>())) {
    std::optional<Approximation> gelu = linear.getGelu();
    if (!gelu || linear.getResidual())
      continue;
    linear.removeGeluAttr();
    OpBuilder after(linear.getContext());
    after.setInsertionPointAfter(linear);
    auto apart = GeluOp::create(after, linear.getLoc(), linear.getType(), linear.getResult(),
                                ApproximationAttr::get(linear.getContext(), *gelu));
    linear.getResult().replaceAllUsesExcept(apart.getResult(), apart);
  }

  // The seed: d(loss)/d(logits) for d(loss) = 1.
  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);
  undifferentiated.try_emplace(loss.getTargets(), loss, "targets");
  accumulate(loss.getLogits(),
             create<CrossEntropyGradOp>(
                 loss.getLoc(), TypeRange{loss.getLogits().getType()},
                 ValueRange{loss.getLogits(), loss.getTargets()})
                 ->getResult(0));

  for (Operation *op : llvm::reverse(forward)) {
    if (op == loss.getOperation())
      continue;
    if (isa<CrossEntropyOp>(op))
      return op->emitOpError(
          "is a second loss; --htp-grad differentiates result 0's only");
    if (isa<AllReduceNormOp>(op))
      return op->emitOpError("has no adjoint here: write htp.all_reduce and htp.layer_norm "
                             "(--htp-fuse-residual makes it after --htp-grad)");
    if (op->getNumResults() != 1)
      return op->emitOpError("has no adjoint in --htp-grad");
    auto dy = adjoints.find(op->getResult(0));
    if (dy == adjoints.end()) // does not reach the loss
      continue;
    if (failed(adjoint(op, dy->second)))
      return failure();
  }

  for (BlockArgument arg : paramsOf(func)) {
    Value gradient = adjoints.lookup(arg);
    Attribute name = func.getArgAttr(arg.getArgNumber(), kParamAttrName);
    if (!gradient && undifferentiated.count(arg)) {
      // Data marked as a parameter: it reaches the loss, but only where
      // the loss has no derivative to give it.
      auto [op, operand] = undifferentiated.lookup(arg);
      InFlightDiagnostic diag =
          func.emitError()
          << "parameter " << name << " (argument #" << arg.getArgNumber()
          << ") is the " << operand << " of '" << op->getName()
          << "', which --htp-grad does not differentiate: that is data, not a "
             "parameter; mark it htp.input";
      diag.attachNote(op->getLoc()) << "the '" << op->getName()
                                    << "' that reads it as its " << operand;
      return diag;
    }
    if (!gradient) {
      // An unread parameter (a head not used by this loss, a layer left
      // out): its gradient is zero, and the optimizer then moves it only by
      // weight decay, as PyTorch's does for a parameter with a zero grad.
      func.emitWarning() << "parameter " << name << " (argument #"
                         << arg.getArgNumber()
                         << ") does not reach the loss: --htp-grad returns a "
                            "zero gradient for it";
      gradient = ZerosLikeOp::create(builder, arg.getLoc(), arg.getType(), arg)
                     .getResult();
    }
    gradients.push_back(gradient);
  }
  return success();
}

/// Whether `op` is the backward an earlier --htp-grad wrote for `loss`: a
/// function marked htp.backward with the loss's arguments, returning the
/// loss's results first.
bool isBackwardOf(Operation *op, func::FuncOp loss) {
  auto func = dyn_cast<func::FuncOp>(op);
  if (!func || !func->hasAttr(kBackwardAttrName) ||
      func.getArgumentTypes() != loss.getArgumentTypes() ||
      func.getNumResults() < loss.getNumResults())
    return false;
  return func.getResultTypes().take_front(loss.getNumResults()) ==
         loss.getResultTypes();
}

/// Whether `func` is a loss function --htp-grad differentiates.
bool isLossFunction(func::FuncOp func) {
  if (func.isDeclaration() || func.isPrivate() ||
      func->hasAttr(kBackwardAttrName) || !func.getBody().hasOneBlock() ||
      func.getNumResults() == 0)
    return false;
  Operation *terminator = func.getBody().front().getTerminator();
  return terminator->getNumOperands() &&
         isa_and_nonnull<CrossEntropyOp>(
             terminator->getOperand(0).getDefiningOp());
}

struct GradPass : htp::impl::HTPGradBase<GradPass> {
  using HTPGradBase::HTPGradBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    SmallVector<func::FuncOp> losses;
    for (auto func : module.getOps<func::FuncOp>())
      if (isLossFunction(func))
        losses.push_back(func);

    for (func::FuncOp loss : losses) {
      std::string name = (loss.getName() + "_grad").str();
      if (Operation *existing = symbols.lookup(name)) {
        // An earlier --htp-grad's output (htp-compile runs the pass on
        // whatever it is given): its backward stands, so a second run
        // changes nothing.
        if (isBackwardOf(existing, loss))
          continue;
        loss.emitError()
            << "--htp-grad would write @" << name
            << ", but the module already has a symbol of that name"
            << (isa<func::FuncOp>(existing) &&
                        existing->hasAttr(kBackwardAttrName)
                    ? " marked htp.backward whose arguments or first results "
                      "are not @" + loss.getName().str() + "'s"
                    : std::string(" that is no backward (htp.backward)"));
        return signalPassFailure();
      }
      func::FuncOp grad = loss.clone();
      grad.setName(name);
      grad->setAttr(kBackwardAttrName, UnitAttr::get(&getContext()));
      module.getBody()->getOperations().insertAfter(Block::iterator(loss),
                                                    grad.getOperation());
      symbols.insert(grad);

      SmallVector<Value> gradients;
      if (failed(AdjointBuilder(grad).run(gradients)))
        return signalPassFailure();

      // Results: the forward's, then one gradient per parameter.
      Operation *terminator = grad.getBody().front().getTerminator();
      SmallVector<Value> results(terminator->getOperands());
      unsigned forwardResults = results.size();
      results.append(gradients);
      OpBuilder builder(terminator);
      func::ReturnOp::create(builder, terminator->getLoc(), results);
      terminator->erase();

      SmallVector<Type> resultTypes(grad.getResultTypes());
      SmallVector<DictionaryAttr> resultAttrs;
      for (unsigned index = 0; index < forwardResults; ++index)
        resultAttrs.push_back(
            builder.getDictionaryAttr(grad.getResultAttrs(index)));
      for (auto [arg, gradient] : llvm::zip(paramsOf(grad), gradients)) {
        resultTypes.push_back(gradient.getType());
        resultAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
            kGradOfAttrName,
            grad.getArgAttr(arg.getArgNumber(), kParamAttrName))));
      }
      grad.setFunctionType(builder.getFunctionType(
          grad.getFunctionType().getInputs(), resultTypes));
      grad.setAllResultAttrs(resultAttrs);
    }
  }
};

} // namespace
