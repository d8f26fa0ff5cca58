//===- HTPDialect.cpp - The htp dialect -----------------------------------===//
//
// Registers the htp ops and attributes, and verifies the htp.* attributes on
// functions and their arguments (a shard against the argument it cuts).
//
//===----------------------------------------------------------------------===//

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "runtime/htp_entry.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"

using namespace mlir;
using namespace mlir::htp;

#include "dialect/HTPOpsDialect.cpp.inc"

#include "dialect/HTPEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialect/HTPAttrs.cpp.inc"

void HTPDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialect/HTPOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialect/HTPAttrs.cpp.inc"
      >();
}

ShardAttr mlir::htp::getArgumentShard(Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  auto function = arg ? dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp()) : nullptr;
  return function ? function.getArgAttrOfType<ShardAttr>(arg.getArgNumber(), kShardAttrName)
                  : ShardAttr();
}

int64_t mlir::htp::smallestDivisorAtLeast(int64_t n, int64_t floor) {
  floor = std::max<int64_t>(1, floor);
  // A divisor d <= sqrt(n) at or above the floor, smallest first.
  int64_t d = floor;
  for (; d <= n / d; ++d)
    if (n % d == 0)
      return d;
  // Otherwise the answer is a co-divisor n / q with q < d: the largest such
  // q gives the smallest co-divisor, which must still reach the floor.
  for (int64_t q = std::min(d - 1, n / floor); q >= 1; --q)
    if (n % q == 0)
      return n / q;
  return n;
}

LogicalResult ShardAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t dim,
                                int64_t parts, ShardLayout layout, DenseI64ArrayAttr units,
                                int64_t unit) {
  if (dim < 0 || dim >= HTP_ENTRY_MAX_RANK)
    return emitError() << "shard dim must be from 0 to " << int64_t(HTP_ENTRY_MAX_RANK) - 1
                       << " (below HTP_ENTRY_MAX_RANK), got " << dim;
  if (parts < 1 || parts > HTP_ENTRY_MAX_TP)
    return emitError() << "shard parts must be from 1 to " << int64_t(HTP_ENTRY_MAX_TP)
                       << " (HTP_ENTRY_MAX_TP), got " << parts;
  if (layout == ShardLayout::Qkv && dim != 0)
    return emitError() << "a qkv shard cuts dim 0 (the q, k and v rows), got dim " << dim;
  if (!units) {
    if (unit != 0)
      return emitError() << "a shard's unit (" << unit << ") goes with its units (uneven shards)";
    return success();
  }
  if (static_cast<int64_t>(units.size()) != parts)
    return emitError() << "an uneven shard has one unit count per part: " << parts
                       << " parts, " << units.size() << " counts";
  for (auto [part, count] : llvm::enumerate(units.asArrayRef()))
    if (count < 1 || count > HTP_ENTRY_MAX_SHARD_UNITS)
      return emitError() << "an uneven shard's unit count must be from 1 to "
                         << int64_t(HTP_ENTRY_MAX_SHARD_UNITS) << ", part " << part << " has "
                         << count;
  if (unit < 1 || unit > HTP_ENTRY_MAX_DIM)
    return emitError() << "an uneven shard's unit must be from 1 to "
                       << int64_t(HTP_ENTRY_MAX_DIM) << " rows or columns, got " << unit;
  return success();
}

/// The extent along the shard's dim of the global tensor and the least of
/// each rank's argument, the most units any rank owns (for qkv: one of the
/// three blocks), or nullopt on overflow.
static std::optional<std::pair<int64_t, int64_t>> unevenExtents(ShardAttr shard) {
  int64_t total = 0, most = 0;
  for (int64_t count : shard.getUnits().asArrayRef()) {
    total += count; // each <= 2^20, at most 1024 of them
    most = std::max(most, count);
  }
  std::optional<int64_t> global = llvm::checkedMul(total, shard.getUnit());
  std::optional<int64_t> local = llvm::checkedMul(most, shard.getUnit());
  if (!global || !local)
    return std::nullopt;
  return std::make_pair(*global, *local);
}

/// Checks a shard against the argument it is attached to (the attribute
/// verified itself when it was built): the dim exists, the global shape it
/// implies is within the limits, and parts matches the function's tp.
static LogicalResult verifyShardOnArgument(Operation *op, unsigned argIndex, Attribute value) {
  auto shard = dyn_cast<ShardAttr>(value);
  if (!shard)
    return op->emitError() << "'" << kShardAttrName << "' on argument #" << argIndex
                           << " must be a #htp.shard<dim = D, parts = N, layout = blocks|qkv>, "
                              "got "
                           << value;
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function || argIndex >= function.getNumArguments())
    return success();
  auto type = dyn_cast<RankedTensorType>(function.getArgumentTypes()[argIndex]);
  if (!type || !type.hasStaticShape())
    return op->emitError() << "'" << kShardAttrName << "' on argument #" << argIndex
                           << " needs a statically shaped tensor, got "
                           << function.getArgumentTypes()[argIndex];
  if (shard.getDim() >= type.getRank())
    return op->emitError() << "'" << kShardAttrName << "' on argument #" << argIndex
                           << " cuts dim " << shard.getDim() << ", but the argument has rank "
                           << type.getRank();
  if (shard.getLayout() == ShardLayout::Qkv && type.getDimSize(0) % 3 != 0)
    return op->emitError() << "'" << kShardAttrName << "' on argument #" << argIndex
                           << ": a qkv shard holds a slice of each of q, k and v, so its rows ("
                           << type.getDimSize(0) << ") must divide by 3";
  auto tp = op->getAttrOfType<IntegerAttr>(kTPAttrName);
  if (tp && tp.getInt() != shard.getParts())
    return op->emitError() << "'" << kShardAttrName << "' on argument #" << argIndex
                           << " has parts = " << shard.getParts() << ", but the function's "
                           << kTPAttrName << " is " << tp.getInt();
  // The global tensor the executor assembles: dim × parts, or sum(units)
  // × unit (× 3 for qkv), checked.
  SmallVector<int64_t> global(type.getShape());
  std::optional<int64_t> size;
  if (!shard.getUnits()) {
    size = llvm::checkedMul(global[shard.getDim()], shard.getParts());
  } else {
    // The room: whole units (per q, k and v block for qkv), at least the
    // most any rank owns (the rest are spare slots), at most a shard's 2^20.
    const int64_t blocks = shard.getLayout() == ShardLayout::Qkv ? 3 : 1;
    const int64_t extent = type.getDimSize(shard.getDim());
    auto extents = unevenExtents(shard);
    std::optional<int64_t> least = extents ? llvm::checkedMul(extents->second, blocks)
                                           : std::nullopt;
    std::optional<int64_t> rows = llvm::checkedMul(shard.getUnit(), blocks);
    if (!least || !rows || extent < *least || extent % *rows != 0 ||
        extent / *rows > HTP_ENTRY_MAX_SHARD_UNITS)
      return op->emitError() << "'" << kShardAttrName << "' on argument #" << argIndex
                             << ": an uneven shard's dim " << shard.getDim()
                             << " is room for whole units ("
                             << (blocks == 3 ? "3 x " : "") << "room x unit), from the most "
                             << "units of any rank (max(units)) to "
                             << int64_t(HTP_ENTRY_MAX_SHARD_UNITS) << ", but it is " << extent;
    size = llvm::checkedMul(extents->first, blocks);
  }
  global[shard.getDim()] = size ? *size : std::numeric_limits<int64_t>::max();
  if (failed(verifyTensorTypeLimits(
          [op]() { return op->emitError(); },
          RankedTensorType::get(global, type.getElementType()),
          "argument #" + Twine(argIndex) + "'s global tensor (dim " + Twine(shard.getDim()) +
              (shard.getUnits() ? " of sum(units) x unit"
                                : " times " + Twine(shard.getParts()) + " parts") +
              ")")))
    return failure();
  // Without htp.tp the function is for one rank: a split argument there was
  // compiled into a .so whose signature the reader then refused. (Checked
  // last, so that the shard's own checks speak on a bare function too.)
  if (!tp && shard.getParts() != 1)
    return op->emitError() << "'" << kShardAttrName << "' on argument #" << argIndex
                           << " has parts = " << shard.getParts() << ", but the function has no "
                           << kTPAttrName << " (one rank)";
  return success();
}

LogicalResult HTPDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  // The workspace placement --htp-assign-workspace records: byte offsets of
  // slots, and the workspace's size, all 64-byte aligned (runtime/
  // htp_entry.h) and within the workspace limit.
  StringRef name = attr.getName().getValue();
  if (name == kWorkspaceOffsetsAttrName) {
    if (!isa_and_nonnull<HTPDialect>(op->getDialect()))
      return op->emitError() << "'" << name << "' belongs on an htp op";
    auto offsets = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    int64_t limit = HTP_ENTRY_MAX_WORKSPACE_BYTES - kWorkspaceAlignment;
    if (!offsets || offsets.size() != static_cast<int64_t>(op->getNumResults()))
      return op->emitError() << "'" << name << "' must be an array<i64> of one offset per "
                             << "result (" << op->getNumResults() << "), got " << attr.getValue();
    for (auto [index, offset] : llvm::enumerate(offsets.asArrayRef()))
      if (offset != kInResultBuffer &&
          (offset < 0 || offset > limit || offset % kWorkspaceAlignment != 0))
        return op->emitError() << "'" << name << "': result #" << index
                               << "'s offset must be a multiple of " << kWorkspaceAlignment
                               << " from 0 to " << limit << ", or " << kInResultBuffer
                               << " (in a result buffer), got " << offset;
    return success();
  }
  bool onFunction = name == kWorkspaceBytesAttrName;
  if (onFunction || name == kScratchOffsetAttrName) {
    if (onFunction ? !isa<FunctionOpInterface>(op) : !isa_and_nonnull<HTPDialect>(op->getDialect()))
      return op->emitError() << "'" << name << "' belongs on "
                             << (onFunction ? "a function" : "an htp op");
    auto bytes = dyn_cast<IntegerAttr>(attr.getValue());
    int64_t limit = HTP_ENTRY_MAX_WORKSPACE_BYTES - (onFunction ? 0 : kWorkspaceAlignment);
    if (!bytes || !bytes.getType().isInteger(64) || bytes.getInt() < 0 ||
        bytes.getInt() > limit || bytes.getInt() % kWorkspaceAlignment != 0)
      return op->emitError() << "'" << name << "' must be an i64 multiple of "
                             << kWorkspaceAlignment << " from 0 to " << limit << ", got "
                             << attr.getValue();
    return success();
  }
  if (name == kBackwardAttrName) {
    if (!isa<FunctionOpInterface>(op) || !isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a unit attribute on a function";
    return success();
  }
  if (name == kDefaultEntryAttrName) {
    if (!isa<ModuleOp>(op) || !isa<StringAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a string on a module";
    return success();
  }
  if (attr.getName() != kTPAttrName)
    return op->emitError() << "unknown htp attribute '" << attr.getName().getValue()
                           << "' (expected '" << kTPAttrName << "' or '" << kBackwardAttrName
                           << "' on a function)";
  auto tp = dyn_cast<IntegerAttr>(attr.getValue());
  if (!tp || tp.getInt() < 1 || tp.getInt() > HTP_ENTRY_MAX_TP)
    return op->emitError() << "'" << kTPAttrName << "' must be an integer from 1 to "
                           << int64_t(HTP_ENTRY_MAX_TP) << " (HTP_ENTRY_MAX_TP), got " << attr.getValue();
  return success();
}

LogicalResult HTPDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                   unsigned argIndex, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kShardAttrName)
    return verifyShardOnArgument(op, argIndex, attr.getValue());
  if (name != kParamAttrName && name != kInputAttrName)
    return op->emitError() << "unknown htp argument attribute '" << name << "' on argument #"
                           << argIndex << " (expected '" << kParamAttrName << "', '"
                           << kInputAttrName << "' or '" << kShardAttrName << "')";
  auto value = dyn_cast<StringAttr>(attr.getValue());
  if (!value || value.getValue().empty())
    return op->emitError() << "'" << name << "' on argument #" << argIndex
                           << " must be a non-empty string";
  // One role per argument: the executor binds a parameter from the weights
  // and an input from the data, and the signature has one "role" for it.
  if (auto function = dyn_cast<FunctionOpInterface>(op); function && name == kParamAttrName)
    if (auto input = function.getArgAttr(argIndex, kInputAttrName))
      return op->emitError() << "argument #" << argIndex << " is marked both '" << kParamAttrName
                             << "' (" << value << ") and '" << kInputAttrName << "' (" << input
                             << "): a parameter is bound from the weights, a data input from "
                                "the inputs; keep one";
  // A name binds one tensor (a parameter from the weights by its name, an
  // input by its name in reports): two arguments of one name would both get
  // the one tensor, silently.
  if (auto function = dyn_cast<FunctionOpInterface>(op))
    for (unsigned other = 0; other < argIndex && other < function.getNumArguments(); ++other)
      if (auto otherName = function.getArgAttrOfType<StringAttr>(other, name);
          otherName && otherName.getValue() == value.getValue())
        return op->emitError() << "arguments #" << other << " and #" << argIndex
                               << " are both '" << name << "' = " << value
                               << ": each names one tensor; give them names of their own";
  // A parameter or input is bound to a file's data: its shape must be one
  // the runtime can hold, as for the ops' operands.
  if (auto function = dyn_cast<FunctionOpInterface>(op))
    if (argIndex < function.getNumArguments())
      return verifyTensorTypeLimits([op]() { return op->emitError(); },
                                    function.getArgumentTypes()[argIndex],
                                    "argument #" + Twine(argIndex) + " ('" + name + "')");
  return success();
}

LogicalResult HTPDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                      unsigned resultIndex, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name != kResultAttrName && name != kGradOfAttrName)
    return op->emitError() << "unknown htp result attribute '" << name << "' on result #"
                           << resultIndex << " (expected '" << kResultAttrName << "' or '"
                           << kGradOfAttrName << "')";
  auto value = dyn_cast<StringAttr>(attr.getValue());
  if (!value || value.getValue().empty())
    return op->emitError() << "'" << name << "' on result #" << resultIndex
                           << " must be a non-empty string";
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function || resultIndex >= function.getNumResults())
    return success();
  // One name per result: a gradient's is "grad.<param>".
  if (name == kResultAttrName) {
    if (function.getResultAttr(resultIndex, kGradOfAttrName))
      return op->emitError() << "result #" << resultIndex << " has both '" << kResultAttrName
                             << "' and '" << kGradOfAttrName
                             << "': a gradient is named after its parameter";
    return success();
  }
  // The gradient of a parameter: of its type (the local shard's, after
  // tensor-parallel splitting), at most one per parameter.
  std::optional<unsigned> param;
  for (unsigned index = 0; index < function.getNumArguments(); ++index)
    if (auto argName = function.getArgAttrOfType<StringAttr>(index, kParamAttrName);
        argName && argName.getValue() == value.getValue())
      param = index;
  if (!param)
    return op->emitError() << "'" << kGradOfAttrName << "' on result #" << resultIndex
                           << " names '" << value.getValue()
                           << "', which is no argument's '" << kParamAttrName << "'";
  Type paramType = function.getArgumentTypes()[*param];
  Type resultType = function.getResultTypes()[resultIndex];
  if (paramType != resultType)
    return op->emitError() << "result #" << resultIndex << ", the gradient of '"
                           << value.getValue() << "' (argument #" << *param << "), has type "
                           << resultType << " but the parameter has " << paramType;
  for (unsigned other = 0; other < resultIndex; ++other)
    if (auto otherParam = function.getResultAttrOfType<StringAttr>(other, kGradOfAttrName);
        otherParam && otherParam.getValue() == value.getValue())
      return op->emitError() << "results #" << other << " and #" << resultIndex
                             << " are both the gradient of '" << value.getValue()
                             << "' (at most one per parameter)";
  return success();
}
