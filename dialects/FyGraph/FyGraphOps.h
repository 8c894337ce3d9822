#ifndef FUYOU_DIALECTS_FYGRAPH_FYGRAPHOPS_H
#define FUYOU_DIALECTS_FYGRAPH_FYGRAPHOPS_H

#include "dialects/FyGraph/FyGraphDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Traits.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialects/FyGraph/FyGraphOps.h.inc"

namespace fuyou::fygraph {
// Whether `mask` can mask the rows of `x` in masked_softmax: shape [1.., R, D]
// with D the last dim of x and R 1 or x's second-to-last dim.
bool isRowMask(mlir::RankedTensorType mask, mlir::RankedTensorType x);
} // namespace fuyou::fygraph

#endif
