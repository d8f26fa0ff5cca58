//===- HTPOps.cpp - Verifiers of the htp ops ------------------------------===//
//
// Each verifier checks every dim an op's semantics ties together and names
// the offending dims in its message, so a user can fix the IR (or the
// generator) without reading this file.
//
//===----------------------------------------------------------------------===//

#include "dialect/HTPOps.h"
#include "runtime/htp_entry.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <cmath>

using namespace mlir;
using namespace mlir::htp;

/// Prints a shape as "8x197x768".
static std::string shapeString(RankedTensorType type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(type.getShape(), os, "x");
  return text;
}

/// Prints a type as the IR writes it ("bf16"), without the quotes a
/// diagnostic puts around a streamed type.
static std::string typeString(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}

static RankedTensorType tensorOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

//===----------------------------------------------------------------------===//
// Limits shared by every op (the HTP_TensorLimits trait) and the arguments
//===----------------------------------------------------------------------===//

LogicalResult mlir::htp::verifyTensorTypeLimits(function_ref<InFlightDiagnostic()> emitError,
                                                Type type, const Twine &what) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return success();
  if (tensor.getRank() > HTP_ENTRY_MAX_RANK)
    return emitError() << what << " has rank " << tensor.getRank() << ", above "
                       << int64_t(HTP_ENTRY_MAX_RANK) << " (HTP_ENTRY_MAX_RANK)";
  // Elements times the element's bytes (4 for f32, 2 for bf16), each step
  // checked: dims up to 2^31-1 in 8 dims overflow int64 long before the
  // byte limit is compared.
  std::optional<int64_t> bytes = elementBytes(tensor.getElementType());
  for (auto [index, size] : llvm::enumerate(tensor.getShape())) {
    if (size < 1)
      return emitError() << what << " has a zero-sized dim (dim " << index << " of ["
                         << shapeString(tensor) << "]); htp tensors are not empty";
    if (size > HTP_ENTRY_MAX_DIM)
      return emitError() << what << " has dim " << index << " = " << size
                         << ", above 2^31-1 (HTP_ENTRY_MAX_DIM, BLAS's int)";
    if (bytes)
      bytes = llvm::checkedMul(*bytes, size);
  }
  if (!bytes || *bytes > HTP_ENTRY_MAX_TENSOR_BYTES)
    return emitError() << what << " [" << shapeString(tensor)
                       << "] holds more than 2^40 bytes of " << typeString(tensor.getElementType())
                       << " (HTP_ENTRY_MAX_TENSOR_BYTES)";
  return success();
}

int64_t mlir::htp::elementBytes(Type elementType) {
  // The ops take f32 and bf16 only, but an htp.param argument of any type
  // is checked against the limits too: size every type without asserting.
  if (elementType.isIntOrFloat())
    return std::max<int64_t>(1, (elementType.getIntOrFloatBitWidth() + 7) / 8);
  if (elementType.isIndex())
    return 8;
  if (auto complex = dyn_cast<ComplexType>(elementType))
    return 2 * elementBytes(complex.getElementType());
  return 1; // unknown to the runtime: the type checks refuse it elsewhere
}

/// The name each op's description gives its operand `index`. Every
/// optional operand comes last, so an index maps to one name.
static std::string operandName(Operation *op, unsigned index) {
  ArrayRef<StringRef> names =
      llvm::TypeSwitch<Operation *, ArrayRef<StringRef>>(op)
          .Case<LinearOp, LayerNormOp>([](auto) {
            static constexpr StringRef names[] = {"input", "weight", "bias"};
            return ArrayRef(names);
          })
          .Case<AttentionOp>([](auto) {
            static constexpr StringRef names[] = {"input", "qkv weight", "qkv bias",
                                                  "proj weight", "proj bias"};
            return ArrayRef(names);
          })
          .Case<MLPOp>([](auto) {
            static constexpr StringRef names[] = {"input", "fc1 weight", "fc2 weight",
                                                  "fc1 bias"};
            return ArrayRef(names);
          })
          .Case<BiasAddOp>([](auto) {
            static constexpr StringRef names[] = {"input", "bias"};
            return ArrayRef(names);
          })
          .Case<AddOp>([](auto) {
            static constexpr StringRef names[] = {"lhs", "rhs"};
            return ArrayRef(names);
          })
          .Default([](Operation *) { // gelu, all_reduce
            static constexpr StringRef names[] = {"input"};
            return ArrayRef(names);
          });
  if (index < names.size())
    return names[index].str();
  return "operand #" + std::to_string(index);
}

LogicalResult mlir::htp::verifyOneElementType(Operation *op) {
  if (op->getNumOperands() == 0)
    return success();
  // The first operand (the input, or lhs) sets the op's element type.
  Type expected = getElementTypeOrSelf(op->getOperand(0).getType());
  auto check = [&](Type type, const std::string &what) -> LogicalResult {
    Type element = getElementTypeOrSelf(type);
    if (element == expected)
      return success();
    return op->emitOpError() << what << " has element type " << typeString(element)
                             << " but " << operandName(op, 0) << " has " << typeString(expected)
                             << " (an htp block is all f32 or all bf16)";
  };
  for (OpOperand &operand : op->getOpOperands().drop_front())
    if (failed(check(operand.get().getType(), operandName(op, operand.getOperandNumber()))))
      return failure();
  for (OpResult result : op->getResults()) // htp ops have one
    if (failed(check(result.getType(), "result")))
      return failure();
  return success();
}

LogicalResult mlir::htp::verifyTensorLimits(Operation *op) {
  auto emit = [op]() { return op->emitOpError(); };
  for (OpOperand &operand : op->getOpOperands())
    if (failed(verifyTensorTypeLimits(emit, operand.get().getType(),
                                      "operand #" + Twine(operand.getOperandNumber()))))
      return failure();
  for (OpResult result : op->getResults())
    if (failed(verifyTensorTypeLimits(emit, result.getType(),
                                      "result #" + Twine(result.getResultNumber()))))
      return failure();
  return success();
}

/// Checks a balance pair number against the runtime's layer limit.
static LogicalResult verifyPair(Operation *op, int64_t pair) {
  if (pair >= 2 * static_cast<int64_t>(HTP_ENTRY_MAX_LAYERS))
    return op->emitOpError() << "pair (" << pair << ") must be below 2^21 (2 * "
                             << "HTP_ENTRY_MAX_LAYERS balance layers)";
  return success();
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
  // 0 only for an op the verifier would refuse (3 * num_heads overflows).
  std::optional<int64_t> perHead = llvm::checkedMul<int64_t>(3, getNumHeads());
  return perHead ? tensorOf(getQkvWeight()).getDimSize(0) / *perHead : 0;
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
  std::optional<int64_t> rowsPerHead = llvm::checkedMul<int64_t>(3, heads);
  if (!rowsPerHead)
    return emitOpError() << "num_heads (" << heads << ") is too large: 3*num_heads overflows "
                         << "int64";
  if (qkv.getDimSize(0) % *rowsPerHead != 0)
    return emitOpError() << "qkv weight rows (" << qkv.getDimSize(0)
                         << ") must be a positive multiple of 3*num_heads (3*" << heads
                         << " = " << *rowsPerHead << ")";
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
    if (failed(verifyPair(*this, *getPair())))
      return failure();
    if (heads > HTP_ENTRY_MAX_UNITS)
      return emitOpError() << "num_heads (" << heads << ") of a balanced attention must be at "
                           << "most 2^24 (HTP_ENTRY_MAX_UNITS units per rank)";
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
  if (hidden / getUnitWidth() > HTP_ENTRY_MAX_UNITS)
    return emitOpError() << "hidden width / unit_width (" << hidden << " / " << getUnitWidth()
                         << " = " << hidden / getUnitWidth()
                         << " units) must be at most 2^24 (HTP_ENTRY_MAX_UNITS)";
  if (failed(verifyPair(*this, getPair())))
    return failure();
  if (getPair() % 2 != 1)
    return emitOpError() << "pair must be odd (2 * layer + 1) for an MLP, got " << getPair();
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
  float epsilon = getEpsilon().convertToFloat();
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon))
    return emitOpError() << "epsilon must be positive and finite, got " << epsilon;
  if (getResult().getType() != input)
    return emitOpError() << "result must have the input's shape [" << shapeString(input)
                         << "], got [" << shapeString(getResult().getType()) << "]";
  return success();
}

// approximate is an enum attribute: its parser admits only none and tanh.
LogicalResult GeluOp::verify() { return success(); }

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
