// The registry of gradient rules used by fy-autodiff: one rule per fygraph op.
#ifndef FUYOU_PASSES_GRADIENTRULES_H
#define FUYOU_PASSES_GRADIENTRULES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"

namespace fuyou {

// Builds the gradients of `op`'s operands from those of its results at the
// builder's insertion point. `dResults[i]` is null where result i has no
// gradient (it is zero); a rule leaves `dOperands[i]` null for an operand
// that gets none (integer operands, or operands that need none).
using GradientRule = mlir::LogicalResult (*)(mlir::OpBuilder &b, mlir::Operation *op,
                                             mlir::ArrayRef<mlir::Value> dResults,
                                             mlir::MutableArrayRef<mlir::Value> dOperands);

// The rule for an op, or null when none is registered.
GradientRule lookupGradientRule(mlir::Operation *op);

} // namespace fuyou

#endif
