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

// The passes that carry out a placement, in order: fy-place-activations,
// fy-stream-params, fy-rows-first, fy-param-waits, fy-early-offload,
// fy-grad-landed, fy-insert-dealloc, fy-async-copies, fy-plan-memory.
// fuyou-compile runs them once; fy-choose-placement on each plan it tries.
struct PlacementOptions {
  std::string activations = "keep", params = "keep";
  int64_t readAhead = 4, paramPrefetch = 0, activationPrefetch = 0, copyWindow = 4, writeBehind = 4;
  int64_t gradLanding = 0;  // fy-grad-landed's distance (0: the plan's)
};
void addPlacementPasses(mlir::OpPassManager &pm, const PlacementOptions &o);

} // namespace fuyou

#endif
