#ifndef FUYOU_PASSES_PASSES_H
#define FUYOU_PASSES_PASSES_H

#include "dialects/FyGraph/FyGraphOps.h"
#include "dialects/FySched/FySchedOps.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace fuyou {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace fuyou

#endif
