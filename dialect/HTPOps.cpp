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

/// Prints a shape given as dims.
static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(shape, os, "x");
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
  // A fused residual follows an optional bias: past the fixed operands, the
  // bias when there is one, then the residual.
  if (auto linear = dyn_cast<LinearOp>(op); linear && index >= 2)
    return index == 2 && linear.getBias() ? "bias" : "residual";
  if (auto attention = dyn_cast<AttentionOp>(op); attention && index >= 4)
    return index == 4 && attention.getProjBias() ? "proj bias" : "residual";
  if (auto reduce = dyn_cast<AllReduceOp>(op); reduce && index >= 1)
    return index == 1 && reduce.getBias() ? "bias" : "residual";
  if (auto reduce = dyn_cast<AllReduceNormOp>(op); reduce && index >= 3)
    return index == 3 && reduce.getBias() ? "bias" : "residual";
  ArrayRef<StringRef> names =
      llvm::TypeSwitch<Operation *, ArrayRef<StringRef>>(op)
          .Case<LinearOp, LayerNormOp>([](auto) { // LinearOp: up to its bias
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
            static constexpr StringRef names[] = {"input", "bias", "residual"};
            return ArrayRef(names);
          })
          .Case<AllReduceNormOp>([](auto) { // AllReduceNormOp: up to its norm's
            static constexpr StringRef names[] = {"input", "norm weight", "norm bias"};
            return ArrayRef(names);
          })
          .Case<AddOp>([](auto) {
            static constexpr StringRef names[] = {"lhs", "rhs"};
            return ArrayRef(names);
          })
          .Case<PatchEmbedOp>([](auto) {
            static constexpr StringRef names[] = {"images", "weight", "bias"};
            return ArrayRef(names);
          })
          .Case<EmbedTokensOp>([](auto) {
            static constexpr StringRef names[] = {"patches", "cls", "pos"};
            return ArrayRef(names);
          })
          .Case<CrossEntropyOp, CrossEntropyGradOp>([](auto) {
            static constexpr StringRef names[] = {"logits", "targets"};
            return ArrayRef(names);
          })
          .Case<LinearGradOp, LayerNormGradOp>([](auto) {
            static constexpr StringRef names[] = {"input", "weight", "dy"};
            return ArrayRef(names);
          })
          .Case<GeluGradOp>([](auto) {
            static constexpr StringRef names[] = {"input", "dy"};
            return ArrayRef(names);
          })
          .Case<MLPGradOp>([](auto) {
            static constexpr StringRef names[] = {"input", "fc1 weight", "fc2 weight", "dy",
                                                  "fc1 bias"};
            return ArrayRef(names);
          })
          .Case<AttentionGradOp>([](auto) {
            static constexpr StringRef names[] = {"input", "qkv weight", "qkv bias",
                                                  "proj weight", "dy"};
            return ArrayRef(names);
          })
          .Case<PatchEmbedGradOp>([](auto) {
            static constexpr StringRef names[] = {"images", "dy"};
            return ArrayRef(names);
          })
          .Case<EmbedTokensGradOp, ClsTokenGradOp>([](auto) {
            static constexpr StringRef names[] = {"dy"};
            return ArrayRef(names);
          })
          .Default([](Operation *) { // gelu, all_reduce, cls_token, row_sum
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
  for (OpResult result : op->getResults())
    if (failed(check(result.getType(), op->getNumResults() == 1
                                           ? std::string("result")
                                           : "result #" + std::to_string(result.getResultNumber()))))
      return failure();
  return success();
}

LogicalResult mlir::htp::verifyF32Only(Operation *op) {
  if (op->getNumOperands() == 0)
    return success();
  Type element = getElementTypeOrSelf(op->getOperand(0).getType());
  if (element.isF32())
    return success();
  return op->emitOpError() << "training ops are f32-only for now; " << operandName(op, 0)
                           << " has element type " << typeString(element);
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
    return op->emitOpError() << "pair (" << pair << ") must be below 2^17 (2 * "
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

/// The input and weight of a linear or its adjoint: input of rank >= 1 whose
/// last dim is the weight's in_features, weight [out_features, in_features].
static LogicalResult verifyLinearOperands(Operation *op, RankedTensorType input,
                                          RankedTensorType weight) {
  if (input.getRank() < 1)
    return op->emitOpError("input must have rank >= 1");
  if (weight.getRank() != 2)
    return op->emitOpError() << "weight must be 2-D [out_features, in_features], got ["
                             << shapeString(weight) << "]";
  if (input.getShape().back() != weight.getDimSize(1))
    return op->emitOpError() << "input's last dim (" << input.getShape().back()
                             << ") must equal the weight's in_features (dim 1 of ["
                             << shapeString(weight) << "] = " << weight.getDimSize(1) << ")";
  return success();
}

/// A fused residual (htp.linear's, htp.attention's) is added to the result
/// element by element: it has the result's type.
static LogicalResult verifyResidual(Operation *op, Value residual, RankedTensorType result) {
  RankedTensorType type = tensorOf(residual);
  if (type != result)
    return op->emitOpError() << "residual must have the result's type [" << shapeString(result)
                             << "], got [" << shapeString(type) << "]";
  return success();
}

LogicalResult LinearOp::verify() {
  RankedTensorType input = tensorOf(getInput()), weight = tensorOf(getWeight());
  RankedTensorType result = getResult().getType();
  if (failed(verifyLinearOperands(*this, input, weight)))
    return failure();
  int64_t outFeatures = weight.getDimSize(0);
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
  if (getResidual()) {
    if (getGelu())
      return emitOpError("has both a gelu and a residual: write one of them as its own op "
                         "(which comes first would be ambiguous)");
    if (failed(verifyResidual(*this, getResidual(), result)))
      return failure();
  }
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

/// The shapes htp.attention and htp.attention_grad share: input [batch,
/// tokens, dim], qkv weight [3*inner, dim] with inner a multiple of
/// num_heads, qkv bias [3*inner], proj weight [dim, inner]. Sets `inner`.
static LogicalResult verifyAttentionOperands(Operation *op, Value inputValue, Value qkvWeight,
                                             Value qkvBias, Value projWeight, int64_t heads,
                                             int64_t &inner) {
  RankedTensorType input = tensorOf(inputValue), qkv = tensorOf(qkvWeight);
  RankedTensorType proj = tensorOf(projWeight);
  if (input.getRank() != 3)
    return op->emitOpError() << "input must be 3-D [batch, tokens, dim], got ["
                             << shapeString(input) << "]";
  int64_t dim = input.getDimSize(2);
  if (qkv.getRank() != 2 || qkv.getDimSize(1) != dim)
    return op->emitOpError() << "qkv weight must be [3*num_heads*head_dim, " << dim
                             << "] (dim 1 = the input's dim), got [" << shapeString(qkv) << "]";
  std::optional<int64_t> rowsPerHead = llvm::checkedMul<int64_t>(3, heads);
  if (!rowsPerHead)
    return op->emitOpError() << "num_heads (" << heads
                             << ") is too large: 3*num_heads overflows int64";
  if (qkv.getDimSize(0) % *rowsPerHead != 0)
    return op->emitOpError() << "qkv weight rows (" << qkv.getDimSize(0)
                             << ") must be a positive multiple of 3*num_heads (3*" << heads
                             << " = " << *rowsPerHead << ")";
  inner = qkv.getDimSize(0) / 3;
  if (failed(verifyVector(op, "qkv bias", qkvBias, 3 * inner, "rows of the qkv weight")))
    return failure();
  if (proj.getRank() != 2 || proj.getDimSize(0) != dim || proj.getDimSize(1) != inner)
    return op->emitOpError() << "proj weight must be [" << dim << ", " << inner
                             << "] ([dim, num_heads*head_dim]), got [" << shapeString(proj)
                             << "]";
  return success();
}

/// The balance pair of htp.attention and htp.attention_grad: within the
/// runtime's limits, even (2 * layer), and num_heads units the signature can
/// count.
static LogicalResult verifyAttentionPair(Operation *op, int64_t pair, int64_t heads) {
  if (failed(verifyPair(op, pair)))
    return failure();
  if (heads > HTP_ENTRY_MAX_UNITS)
    return op->emitOpError() << "num_heads (" << heads << ") of a balanced attention must be at "
                             << "most 2^20 (HTP_ENTRY_MAX_UNITS units per rank: the planner's units_per_rank)";
  if (pair % 2 != 0)
    return op->emitOpError() << "pair must be even (2 * layer) for attention, got " << pair;
  return success();
}

LogicalResult AttentionOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  int64_t heads = getNumHeads(), inner;
  if (failed(verifyAttentionOperands(*this, getInput(), getQkvWeight(), getQkvBias(),
                                     getProjWeight(), heads, inner)))
    return failure();
  int64_t dim = input.getDimSize(2);
  if (getProjBias() &&
      failed(verifyVector(*this, "proj bias", getProjBias(), dim, "the input's dim")))
    return failure();
  if (getResult().getType() != input)
    return emitOpError() << "result must have the input's shape [" << shapeString(input)
                         << "], got [" << shapeString(getResult().getType()) << "]";
  if (getPair()) {
    if (failed(verifyAttentionPair(*this, *getPair(), heads)))
      return failure();
    if (getProjBias())
      return emitOpError("a balanced attention (with a pair) yields a partial sum: its proj "
                         "bias must follow the all-reduce, not be an operand");
    if (getResidual())
      return emitOpError("a balanced attention (with a pair) yields a partial sum: its "
                         "residual must be added after the all-reduce, not be an operand");
  }
  if (getResidual() && failed(verifyResidual(*this, getResidual(), getResult().getType())))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// MLPOp
//===----------------------------------------------------------------------===//

/// The operands and attributes htp.mlp and htp.mlp_grad share: input of
/// rank >= 1 [..., dim], fc1 weight [hidden, dim], fc2 weight [dim,
/// hidden], fc1 bias [hidden] when present, hidden a multiple of
/// unit_width in at most HTP_ENTRY_MAX_UNITS units, pair odd and in range.
static LogicalResult verifyMLPOperands(Operation *op, Value inputValue, Value fc1Weight,
                                       Value fc2Weight, Value fc1Bias, int64_t unitWidth,
                                       int64_t pair) {
  RankedTensorType input = tensorOf(inputValue), fc1 = tensorOf(fc1Weight),
                   fc2 = tensorOf(fc2Weight);
  if (input.getRank() < 1)
    return op->emitOpError("input must have rank >= 1");
  int64_t dim = input.getShape().back();
  if (fc1.getRank() != 2 || fc1.getDimSize(1) != dim)
    return op->emitOpError() << "fc1 weight must be [hidden, " << dim << "], got ["
                             << shapeString(fc1) << "]";
  int64_t hidden = fc1.getDimSize(0);
  if (fc2.getRank() != 2 || fc2.getDimSize(0) != dim || fc2.getDimSize(1) != hidden)
    return op->emitOpError() << "fc2 weight must be [" << dim << ", " << hidden << "], got ["
                             << shapeString(fc2) << "]";
  if (fc1Bias &&
      failed(verifyVector(op, "fc1 bias", fc1Bias, hidden, "rows of the fc1 weight")))
    return failure();
  if (hidden % unitWidth != 0)
    return op->emitOpError() << "hidden width (" << hidden
                             << ") must be a multiple of unit_width (" << unitWidth << ")";
  if (hidden / unitWidth > HTP_ENTRY_MAX_UNITS)
    return op->emitOpError() << "hidden width / unit_width (" << hidden << " / " << unitWidth
                             << " = " << hidden / unitWidth
                             << " units) must be at most 2^20 (HTP_ENTRY_MAX_UNITS: the planner's units_per_rank)";
  if (failed(verifyPair(op, pair)))
    return failure();
  if (pair % 2 != 1)
    return op->emitOpError() << "pair must be odd (2 * layer + 1) for an MLP, got " << pair;
  return success();
}

LogicalResult MLPOp::verify() {
  if (failed(verifyMLPOperands(*this, getInput(), getFc1Weight(), getFc2Weight(), getFc1Bias(),
                               getUnitWidth(), getPair())))
    return failure();
  RankedTensorType input = tensorOf(getInput());
  if (getResult().getType() != input)
    return emitOpError() << "result must have the input's shape [" << shapeString(input)
                         << "], got [" << shapeString(getResult().getType()) << "]";
  return success();
}

//===----------------------------------------------------------------------===//
// LayerNormOp, GeluOp, AddOp, BiasAddOp, AllReduceOp
//===----------------------------------------------------------------------===//

/// A layer norm's input (rank >= 1), weights ([last dim], named with
/// `prefix`) and epsilon (positive, finite): htp.layer_norm's and
/// htp.all_reduce_norm's.
static LogicalResult verifyNorm(Operation *op, Value input, Value weight, Value bias,
                                FloatAttr epsilon, StringRef prefix) {
  RankedTensorType type = tensorOf(input);
  if (type.getRank() < 1)
    return op->emitOpError("input must have rank >= 1");
  const int64_t dim = type.getShape().back();
  if (failed(verifyVector(op, (prefix + "weight").str(), weight, dim, "the input's last dim")) ||
      failed(verifyVector(op, (prefix + "bias").str(), bias, dim, "the input's last dim")))
    return failure();
  const float value = epsilon.getValue().convertToFloat();
  if (!(value > 0.0f) || !std::isfinite(value))
    return op->emitOpError() << "epsilon must be positive and finite, got " << value;
  return success();
}

LogicalResult LayerNormOp::verify() {
  if (failed(verifyNorm(*this, getInput(), getWeight(), getBias(), getEpsilonAttr(), "")))
    return failure();
  if (getGroup() && getGroup()->empty())
    return emitOpError("group must be a non-empty name where given");
  RankedTensorType input = tensorOf(getInput());
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
  RankedTensorType input = tensorOf(getInput());
  if ((getBias() || getResidual()) && input.getRank() < 1)
    return emitOpError("input must have rank >= 1 to take a bias or a residual (rows of a "
                       "last dim)");
  if (getBias())
    return verifyVector(*this, "bias", getBias(), input.getShape().back(), "the input's last dim");
  return success();
}

LogicalResult AllReduceNormOp::verify() {
  if (getGroup().empty())
    return emitOpError("group must be a non-empty name");
  return verifyNorm(*this, getInput(), getWeight(), getNormBias(), getEpsilonAttr(), "norm ");
}

//===----------------------------------------------------------------------===//
// Training ops (f32 only: the HTP_F32Only trait checked that first)
//===----------------------------------------------------------------------===//

/// Checks that `value` (an operand or a result, named `what`) has the shape
/// `expected`, saying `because` why.
static LogicalResult verifyShape(Operation *op, StringRef what, Value value,
                                 ArrayRef<int64_t> expected, StringRef because) {
  RankedTensorType type = tensorOf(value);
  if (type.getShape() == expected)
    return success();
  return op->emitOpError() << what << " must be [" << shapeString(expected) << "] (" << because
                           << "), got [" << shapeString(type) << "]";
}

/// The images of htp.patch_embed and its gradient: [B, C, H, W] with H and W
/// multiples of `patch`, and a patch vector (C*P*P) BLAS's int can count.
/// Sets `patches` to N = (H/P)*(W/P) (below 2^62: no overflow).
static LogicalResult verifyImages(Operation *op, Value imagesValue, int64_t patch,
                                  int64_t &patches) {
  RankedTensorType images = tensorOf(imagesValue);
  if (images.getRank() != 4)
    return op->emitOpError() << "images must be 4-D [batch, channels, height, width], got ["
                             << shapeString(images) << "]";
  int64_t height = images.getDimSize(2), width = images.getDimSize(3);
  if (height % patch != 0 || width % patch != 0)
    return op->emitOpError() << "images' height (" << height << ") and width (" << width
                             << ") must be multiples of patch (" << patch << ")";
  std::optional<int64_t> vector =
      llvm::checkedMul<int64_t>(images.getDimSize(1), patch);
  if (vector)
    vector = llvm::checkedMul<int64_t>(*vector, patch);
  if (!vector || *vector > HTP_ENTRY_MAX_DIM)
    return op->emitOpError() << "a patch vector (channels*patch*patch = " << images.getDimSize(1)
                             << "*" << patch << "*" << patch
                             << ") must have at most 2^31-1 elements (BLAS's int)";
  patches = (height / patch) * (width / patch);
  return success();
}

/// The weight gradient's (or the weight's) [D, C, P, P].
static SmallVector<int64_t> patchWeightShape(Value images, int64_t dim, int64_t patch) {
  return {dim, tensorOf(images).getDimSize(1), patch, patch};
}

LogicalResult PatchEmbedOp::verify() {
  int64_t patch = getPatch(), patches;
  if (failed(verifyImages(*this, getImages(), patch, patches)))
    return failure();
  RankedTensorType images = tensorOf(getImages()), weight = tensorOf(getWeight());
  if (weight.getRank() != 4)
    return emitOpError() << "weight must be 4-D [dim, " << images.getDimSize(1) << ", " << patch
                         << ", " << patch << "], got [" << shapeString(weight) << "]";
  int64_t dim = weight.getDimSize(0);
  if (failed(verifyShape(*this, "weight", getWeight(), patchWeightShape(getImages(), dim, patch),
                         "[dim, channels, patch, patch]")) ||
      failed(verifyVector(*this, "bias", getBias(), dim, "dim 0 of the weight")))
    return failure();
  return verifyShape(*this, "result", getResult(), {images.getDimSize(0), patches, dim},
                     "[batch, (height/patch)*(width/patch), dim]");
}

LogicalResult EmbedTokensOp::verify() {
  RankedTensorType patches = tensorOf(getPatches());
  if (patches.getRank() != 3)
    return emitOpError() << "patches must be 3-D [batch, patches, dim], got ["
                         << shapeString(patches) << "]";
  int64_t batch = patches.getDimSize(0), count = patches.getDimSize(1),
          dim = patches.getDimSize(2);
  if (failed(verifyShape(*this, "cls", getCls(), {1, 1, dim}, "[1, 1, dim]")) ||
      failed(verifyShape(*this, "pos", getPos(), {1, count + 1, dim}, "[1, patches+1, dim]")))
    return failure();
  return verifyShape(*this, "result", getResult(), {batch, count + 1, dim},
                     "[batch, patches+1, dim]");
}

LogicalResult ClsTokenOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  if (input.getRank() != 3)
    return emitOpError() << "input must be 3-D [batch, tokens, dim], got ["
                         << shapeString(input) << "]";
  return verifyShape(*this, "result", getResult(), {input.getDimSize(0), input.getDimSize(2)},
                     "[batch, dim]: token 0 of each sequence");
}

/// logits [B, K] and targets of the same shape (class probabilities).
static LogicalResult verifyLogitsAndTargets(Operation *op, Value logitsValue, Value targets) {
  RankedTensorType logits = tensorOf(logitsValue);
  if (logits.getRank() != 2)
    return op->emitOpError() << "logits must be 2-D [batch, classes], got ["
                             << shapeString(logits) << "]";
  return verifyShape(op, "targets", targets, logits.getShape(),
                     "the logits' shape: one probability row per logits row");
}

LogicalResult CrossEntropyOp::verify() {
  if (failed(verifyLogitsAndTargets(*this, getLogits(), getTargets())))
    return failure();
  return verifyShape(*this, "result", getResult(), {1}, "the mean loss, one value");
}

LogicalResult CrossEntropyGradOp::verify() {
  if (failed(verifyLogitsAndTargets(*this, getLogits(), getTargets())))
    return failure();
  return verifyShape(*this, "result", getDlogits(), tensorOf(getLogits()).getShape(),
                     "the logits' shape");
}

LogicalResult LinearGradOp::verify() {
  RankedTensorType input = tensorOf(getInput()), weight = tensorOf(getWeight());
  if (failed(verifyLinearOperands(*this, input, weight)))
    return failure();
  int64_t outFeatures = weight.getDimSize(0);
  SmallVector<int64_t> output(input.getShape());
  output.back() = outFeatures;
  if (failed(verifyShape(*this, "dy", getDy(), output,
                         "the forward's result: input with its last dim replaced by "
                         "out_features")) ||
      failed(verifyShape(*this, "dx (result #0)", getDx(), input.getShape(),
                         "the input's shape")) ||
      failed(verifyShape(*this, "dweight (result #1)", getDweight(), weight.getShape(),
                         "the weight's shape")))
    return failure();
  if (getDbias() && failed(verifyShape(*this, "dbias (result #2)", getDbias(), {outFeatures},
                                       "out_features of the weight")))
    return failure();
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  if (input.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  int64_t dim = input.getShape().back();
  if (failed(verifyVector(*this, "weight", getWeight(), dim, "the input's last dim")) ||
      failed(verifyShape(*this, "dy", getDy(), input.getShape(), "the input's shape")))
    return failure();
  float epsilon = getEpsilon().convertToFloat();
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon))
    return emitOpError() << "epsilon must be positive and finite, got " << epsilon;
  if (failed(verifyShape(*this, "dx (result #0)", getDx(), input.getShape(),
                         "the input's shape")) ||
      failed(verifyShape(*this, "dweight (result #1)", getDweight(), {dim},
                         "the input's last dim")) ||
      failed(verifyShape(*this, "dbias (result #2)", getDbias(), {dim}, "the input's last dim")))
    return failure();
  return success();
}

LogicalResult GeluGradOp::verify() {
  ArrayRef<int64_t> shape = tensorOf(getInput()).getShape();
  if (failed(verifyShape(*this, "dy", getDy(), shape, "the input's shape")) ||
      failed(verifyShape(*this, "result", getDx(), shape, "the input's shape")))
    return failure();
  return success();
}

int64_t AttentionGradOp::getHeadDim() {
  std::optional<int64_t> perHead = llvm::checkedMul<int64_t>(3, getNumHeads());
  return perHead ? tensorOf(getQkvWeight()).getDimSize(0) / *perHead : 0;
}

LogicalResult AttentionGradOp::verify() {
  int64_t inner;
  if (failed(verifyAttentionOperands(*this, getInput(), getQkvWeight(), getQkvBias(),
                                     getProjWeight(), getNumHeads(), inner)))
    return failure();
  ArrayRef<int64_t> input = tensorOf(getInput()).getShape();
  if (failed(verifyShape(*this, "dy", getDy(), input, "the input's shape")) ||
      failed(verifyShape(*this, "dx (result #0)", getDx(), input, "the input's shape")) ||
      failed(verifyShape(*this, "dqkv_weight (result #1)", getDqkvWeight(),
                         tensorOf(getQkvWeight()).getShape(), "the qkv weight's shape")) ||
      failed(verifyShape(*this, "dqkv_bias (result #2)", getDqkvBias(),
                         tensorOf(getQkvBias()).getShape(), "the qkv bias's shape")) ||
      failed(verifyShape(*this, "dproj_weight (result #3)", getDprojWeight(),
                         tensorOf(getProjWeight()).getShape(), "the proj weight's shape")))
    return failure();
  if (getDprojBias() && failed(verifyShape(*this, "dproj_bias (result #4)", getDprojBias(),
                                           {input.back()}, "the input's dim")))
    return failure();
  if (getPair()) {
    if (failed(verifyAttentionPair(*this, *getPair(), getNumHeads())))
      return failure();
    if (getDprojBias())
      return emitOpError("a balanced attention (with a pair) has no proj bias: its gradient "
                         "has no dproj_bias (result #4)");
  }
  return success();
}

LogicalResult MLPGradOp::verify() {
  if (failed(verifyMLPOperands(*this, getInput(), getFc1Weight(), getFc2Weight(), getFc1Bias(),
                               getUnitWidth(), getPair())))
    return failure();
  ArrayRef<int64_t> input = tensorOf(getInput()).getShape();
  ArrayRef<int64_t> fc1 = tensorOf(getFc1Weight()).getShape();
  if (failed(verifyShape(*this, "dy", getDy(), input,
                         "the forward's result: the input's shape")) ||
      failed(verifyShape(*this, "dx (result #0)", getDx(), input, "the input's shape")) ||
      failed(verifyShape(*this, "dfc1_weight (result #1)", getDfc1Weight(), fc1,
                         "the fc1 weight's shape")) ||
      failed(verifyShape(*this, "dfc2_weight (result #2)", getDfc2Weight(),
                         tensorOf(getFc2Weight()).getShape(), "the fc2 weight's shape")))
    return failure();
  if (static_cast<bool>(getFc1Bias()) != static_cast<bool>(getDfc1Bias()))
    return emitOpError() << "dfc1_bias (result #3) must be written exactly when fc1_bias is "
                         << "an operand; got " << (getFc1Bias() ? "an" : "no") << " fc1 bias and "
                         << getNumResults() << " results";
  if (getDfc1Bias() && failed(verifyShape(*this, "dfc1_bias (result #3)", getDfc1Bias(),
                                          {fc1[0]}, "rows of the fc1 weight")))
    return failure();
  return success();
}

LogicalResult RowSumOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  if (input.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  return verifyShape(*this, "result", getResult(), {input.getShape().back()},
                     "the input's last dim");
}

LogicalResult PatchEmbedGradOp::verify() {
  int64_t patch = getPatch(), patches;
  if (failed(verifyImages(*this, getImages(), patch, patches)))
    return failure();
  RankedTensorType images = tensorOf(getImages()), dy = tensorOf(getDy());
  if (dy.getRank() != 3)
    return emitOpError() << "dy must be 3-D [batch, patches, dim], got [" << shapeString(dy)
                         << "]";
  int64_t dim = dy.getDimSize(2);
  if (failed(verifyShape(*this, "dy", getDy(), {images.getDimSize(0), patches, dim},
                         "[batch, (height/patch)*(width/patch), dim]")) ||
      failed(verifyShape(*this, "dweight (result #0)", getDweight(),
                         patchWeightShape(getImages(), dim, patch),
                         "[dim, channels, patch, patch]")) ||
      failed(verifyShape(*this, "dbias (result #1)", getDbias(), {dim}, "dy's last dim")))
    return failure();
  return success();
}

LogicalResult EmbedTokensGradOp::verify() {
  RankedTensorType dy = tensorOf(getDy());
  if (dy.getRank() != 3)
    return emitOpError() << "dy must be 3-D [batch, patches+1, dim], got [" << shapeString(dy)
                         << "]";
  int64_t batch = dy.getDimSize(0), tokens = dy.getDimSize(1), dim = dy.getDimSize(2);
  if (tokens < 2)
    return emitOpError() << "dy must have at least 2 tokens (the class token and a patch), got "
                         << tokens;
  if (failed(verifyShape(*this, "dpatches (result #0)", getDpatches(), {batch, tokens - 1, dim},
                         "[batch, patches, dim]")) ||
      failed(verifyShape(*this, "dcls (result #1)", getDcls(), {1, 1, dim}, "[1, 1, dim]")) ||
      failed(verifyShape(*this, "dpos (result #2)", getDpos(), {1, tokens, dim},
                         "[1, patches+1, dim]")))
    return failure();
  return success();
}

LogicalResult ClsTokenGradOp::verify() {
  RankedTensorType dy = tensorOf(getDy()), dx = tensorOf(getDx());
  if (dy.getRank() != 2)
    return emitOpError() << "dy must be 2-D [batch, dim], got [" << shapeString(dy) << "]";
  if (dx.getRank() != 3)
    return emitOpError() << "result must be 3-D [batch, tokens, dim], got [" << shapeString(dx)
                         << "]";
  return verifyShape(*this, "result", getDx(),
                     {dy.getDimSize(0), dx.getDimSize(1), dy.getDimSize(1)},
                     "[batch, tokens, dim] with dy's batch and dim");
}

LogicalResult ZerosLikeOp::verify() { return success(); }

#define GET_OP_CLASSES
#include "dialect/HTPOps.cpp.inc"
