//===- HTPOps.h - The htp dialect's ops -------------------------*- C++ -*-===//
//
// Declares the ops generated from HTPOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_DIALECT_HTPOPS_H
#define HTP_DIALECT_HTPOPS_H

#include "dialect/HTPDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialect/HTPOps.h.inc"

#endif // HTP_DIALECT_HTPOPS_H
