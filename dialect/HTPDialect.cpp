//===- HTPDialect.cpp - The htp dialect -----------------------------------===//
//
// Registers the htp ops and verifies the htp.* attributes on functions and
// their arguments.
//
//===----------------------------------------------------------------------===//

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "runtime/htp_entry.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace mlir::htp;

#include "dialect/HTPOpsDialect.cpp.inc"

void HTPDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialect/HTPOps.cpp.inc"
      >();
}

/// Checks an htp.shard dictionary: {dim = D : i64, parts = N : i64, layout = "blocks"|"qkv"}.
static LogicalResult verifyShardAttr(Operation *op, unsigned argIndex, Attribute value) {
  auto fail = [&]() {
    return op->emitError() << "'" << kShardAttrName << "' on argument #" << argIndex
                           << " must be {dim = D : i64, parts = N : i64, layout = \"blocks\" "
                              "or \"qkv\"} with D >= 0 and N >= 1, got "
                           << value;
  };
  auto dict = dyn_cast<DictionaryAttr>(value);
  if (!dict || dict.size() != 3)
    return fail();
  auto dim = dict.getAs<IntegerAttr>("dim");
  auto parts = dict.getAs<IntegerAttr>("parts");
  auto layout = dict.getAs<StringAttr>("layout");
  if (!dim || !parts || !layout || dim.getInt() < 0 || parts.getInt() < 1 ||
      (layout.getValue() != "blocks" && layout.getValue() != "qkv") ||
      (layout.getValue() == "qkv" && dim.getInt() != 0))
    return fail();
  return success();
}

LogicalResult HTPDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() != kTPAttrName)
    return op->emitError() << "unknown htp attribute '" << attr.getName().getValue()
                           << "' (expected '" << kTPAttrName << "' on a function)";
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
    return verifyShardAttr(op, argIndex, attr.getValue());
  if (name != kParamAttrName && name != kInputAttrName)
    return op->emitError() << "unknown htp argument attribute '" << name << "' on argument #"
                           << argIndex << " (expected '" << kParamAttrName << "', '"
                           << kInputAttrName << "' or '" << kShardAttrName << "')";
  auto value = dyn_cast<StringAttr>(attr.getValue());
  if (!value || value.getValue().empty())
    return op->emitError() << "'" << name << "' on argument #" << argIndex
                           << " must be a non-empty string";
  // A parameter or input is bound to a file's data: its shape must be one
  // the runtime can hold, as for the ops' operands.
  if (auto function = dyn_cast<FunctionOpInterface>(op))
    if (argIndex < function.getNumArguments())
      return verifyTensorTypeLimits([op]() { return op->emitError(); },
                                    function.getArgumentTypes()[argIndex],
                                    "argument #" + Twine(argIndex) + " ('" + name + "')");
  return success();
}
