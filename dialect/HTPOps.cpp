//===- HTPOps.cpp - Verifiers of the htp ops ------------------------------===//
//
// Each verifier checks every dim an op's semantics ties together and names
// the offending dims in its message, so a user can fix the IR (or the
// generator) without reading this file.
//
//===----------------------------------------------------------------------===//

#include "dialect/HTPOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::htp;

/// Prints a shape as "8x197x768".
static std::string shapeString(RankedTensorType type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(type.getShape(), os, "x");
  return text;
}

static RankedTensorType tensorOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// Checks that `vector` is 1-D with `expected` elements.
static LogicalResult verifyVector(Operation *op, StringRef what, Value vector,
                                  int64_t expected, StringRef because) {
  RankedTensorType type = tensorOf(vector);
  if (type.getRank() != 1 || type.getDimSize(0) != expected)
    return op->emitOpError() << what << " must be [" << expected << "] (" << because
                             << "), got [" << shapeString(type) << "]";
  return success();
}

//===----------------------------------------------------------------------===//
// LinearOp
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  RankedTensorType input = tensorOf(getInput()), weight = tensorOf(getWeight());
  RankedTensorType result = getResult().getType();
  if (input.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  if (weight.getRank() != 2)
    return emitOpError() << "weight must be 2-D [out_features, in_features], got ["
                         << shapeString(weight) << "]";
  int64_t inFeatures = weight.getDimSize(1), outFeatures = weight.getDimSize(0);
  if (input.getShape().back() != inFeatures)
    return emitOpError() << "input's last dim (" << input.getShape().back()
                         << ") must equal the weight's in_features (dim 1 of ["
                         << shapeString(weight) << "] = " << inFeatures << ")";
  if (getBias() && failed(verifyVector(*this, "bias", getBias(), outFeatures,
                                       "out_features of the weight")))
    return failure();
  SmallVector<int64_t> expected(input.getShape());
  expected.back() = outFeatures;
  if (result.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError() << "result must be ["
                         << shapeString(RankedTensorType::get(expected, input.getElementType()))
                         << "] (input with its last dim replaced by out_features), got ["
                         << shapeString(result) << "]";
  return success();
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

int64_t AttentionOp::getHeadDim() {
  return tensorOf(getQkvWeight()).getDimSize(0) / (3 * getNumHeads());
}

LogicalResult AttentionOp::verify() {
  RankedTensorType input = tensorOf(getInput()), qkv = tensorOf(getQkvWeight());
  RankedTensorType proj = tensorOf(getProjWeight());
  int64_t heads = getNumHeads();
  if (input.getRank() != 3)
    return emitOpError() << "input must be 3-D [batch, tokens, dim], got ["
                         << shapeString(input) << "]";
  int64_t dim = input.getDimSize(2);
  if (qkv.getRank() != 2 || qkv.getDimSize(1) != dim)
    return emitOpError() << "qkv weight must be [3*num_heads*head_dim, " << dim
                         << "] (dim 1 = the input's dim), got [" << shapeString(qkv) << "]";
  if (qkv.getDimSize(0) == 0 || qkv.getDimSize(0) % (3 * heads) != 0)
    return emitOpError() << "qkv weight rows (" << qkv.getDimSize(0)
                         << ") must be a positive multiple of 3*num_heads (3*" << heads
                         << " = " << 3 * heads << ")";
  int64_t inner = qkv.getDimSize(0) / 3;
  if (failed(verifyVector(*this, "qkv bias", getQkvBias(), 3 * inner,
                          "rows of the qkv weight")))
    return failure();
  if (proj.getRank() != 2 || proj.getDimSize(0) != dim || proj.getDimSize(1) != inner)
    return emitOpError() << "proj weight must be [" << dim << ", " << inner
                         << "] ([dim, num_heads*head_dim]), got [" << shapeString(proj) << "]";
  if (getProjBias() &&
      failed(verifyVector(*this, "proj bias", getProjBias(), dim, "the input's dim")))
    return failure();
  if (getResult().getType() != input)
    return emitOpError() << "result must have the input's shape [" << shapeString(input)
                         << "], got [" << shapeString(getResult().getType()) << "]";
  if (getPair()) {
    if (*getPair() % 2 != 0)
      return emitOpError() << "pair must be even (2 * layer) for attention, got " << *getPair();
    if (getProjBias())
      return emitOpError("a balanced attention (with a pair) yields a partial sum: its proj "
                         "bias must follow the all-reduce, not be an operand");
  }
  return success();
}

//===----------------------------------------------------------------------===//
// MLPOp
//===----------------------------------------------------------------------===//

LogicalResult MLPOp::verify() {
  RankedTensorType input = tensorOf(getInput()), fc1 = tensorOf(getFc1Weight()),
                   fc2 = tensorOf(getFc2Weight());
  if (input.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  int64_t dim = input.getShape().back();
  if (fc1.getRank() != 2 || fc1.getDimSize(1) != dim)
    return emitOpError() << "fc1 weight must be [hidden, " << dim << "], got ["
                         << shapeString(fc1) << "]";
  int64_t hidden = fc1.getDimSize(0);
  if (fc2.getRank() != 2 || fc2.getDimSize(0) != dim || fc2.getDimSize(1) != hidden)
    return emitOpError() << "fc2 weight must be [" << dim << ", " << hidden << "], got ["
                         << shapeString(fc2) << "]";
  if (getFc1Bias() &&
      failed(verifyVector(*this, "fc1 bias", getFc1Bias(), hidden, "rows of the fc1 weight")))
    return failure();
  if (hidden % getUnitWidth() != 0)
    return emitOpError() << "hidden width (" << hidden << ") must be a multiple of unit_width ("
                         << getUnitWidth() << ")";
  if (getPair() % 2 != 1)
    return emitOpError() << "pair must be odd (2 * layer + 1) for an MLP, got " << getPair();
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError() << "approximate must be \"none\" or \"tanh\", got \""
                         << getApproximate() << "\"";
  if (getResult().getType() != input)
    return emitOpError() << "result must have the input's shape [" << shapeString(input)
                         << "], got [" << shapeString(getResult().getType()) << "]";
  return success();
}

//===----------------------------------------------------------------------===//
// LayerNormOp, GeluOp, AddOp, BiasAddOp, AllReduceOp
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  if (input.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  int64_t dim = input.getShape().back();
  if (failed(verifyVector(*this, "weight", getWeight(), dim, "the input's last dim")) ||
      failed(verifyVector(*this, "bias", getBias(), dim, "the input's last dim")))
    return failure();
  if (!(getEpsilon().convertToFloat() > 0.0f))
    return emitOpError() << "epsilon must be positive, got " << getEpsilon().convertToFloat();
  if (getResult().getType() != input)
    return emitOpError() << "result must have the input's shape [" << shapeString(input)
                         << "], got [" << shapeString(getResult().getType()) << "]";
  return success();
}

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError() << "approximate must be \"none\" or \"tanh\", got \""
                         << getApproximate() << "\"";
  return success();
}

LogicalResult AddOp::verify() { return success(); }

LogicalResult BiasAddOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  if (input.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  return verifyVector(*this, "bias", getBias(), input.getShape().back(), "the input's last dim");
}

LogicalResult AllReduceOp::verify() {
  if (getGroup().empty())
    return emitOpError("group must be a non-empty name");
  return success();
}

#define GET_OP_CLASSES
#include "dialect/HTPOps.cpp.inc"
