//===- HTPDialect.cpp - The htp dialect -----------------------------------===//
//
// Registers the htp ops and verifies the htp.* attributes on function
// arguments.
//
//===----------------------------------------------------------------------===//

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace mlir::htp;

#include "dialect/HTPOpsDialect.cpp.inc"

void HTPDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialect/HTPOps.cpp.inc"
      >();
}

LogicalResult HTPDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                   unsigned argIndex, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name != kParamAttrName && name != kInputAttrName)
    return op->emitError() << "unknown htp argument attribute '" << name << "' on argument #"
                           << argIndex << " (expected '" << kParamAttrName << "' or '"
                           << kInputAttrName << "')";
  auto value = dyn_cast<StringAttr>(attr.getValue());
  if (!value || value.getValue().empty())
    return op->emitError() << "'" << name << "' on argument #" << argIndex
                           << " must be a non-empty string";
  return success();
}
