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

namespace mlir::htp {
/// Checks every ranked tensor operand and result of `op` against the limits
/// of runtime/htp_entry.h (rank, dims from 1 to 2^31-1, bytes).
LogicalResult verifyTensorLimits(Operation *op);

/// Checks that every tensor operand and result of `op` has the element type
/// of its first operand, naming the operand (or the result) that differs.
LogicalResult verifyOneElementType(Operation *op);

/// The HTP_OneElementType trait of every htp op (HTPOps.td): a block is
/// all f32 or all bf16, op by op.
template <typename ConcreteType>
class OneElementType : public OpTrait::TraitBase<ConcreteType, OneElementType> {
public:
  static LogicalResult verifyTrait(Operation *op) { return verifyOneElementType(op); }
};

/// Checks that `op`'s first operand is f32 (the training ops' contract; the
/// OneElementType trait then makes every tensor of the op f32).
LogicalResult verifyF32Only(Operation *op);

/// The HTP_F32Only trait of the training ops (HTPOps.td).
template <typename ConcreteType>
class F32Only : public OpTrait::TraitBase<ConcreteType, F32Only> {
public:
  static LogicalResult verifyTrait(Operation *op) { return verifyF32Only(op); }
};

/// The HTP_TensorLimits trait of every htp op (HTPOps.td).
template <typename ConcreteType>
class TensorLimits : public OpTrait::TraitBase<ConcreteType, TensorLimits> {
public:
  static LogicalResult verifyTrait(Operation *op) { return verifyTensorLimits(op); }
};
} // namespace mlir::htp

#define GET_OP_CLASSES
#include "dialect/HTPOps.h.inc"

#endif // HTP_DIALECT_HTPOPS_H
