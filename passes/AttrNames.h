// The discardable attributes the passes, the cost model and the EmitC
// conversion hand each other, declared once: each name, what it holds and
// who writes it.
#ifndef FUYOU_PASSES_ATTRNAMES_H
#define FUYOU_PASSES_ATTRNAMES_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/StringRef.h"

namespace fuyou::attr {

// On the module, from the compile's flags (fy-program-attrs).
inline constexpr llvm::StringLiteral kPrecision = "fy.precision";      // string: bf16, fp16, tf32, fp32
inline constexpr llvm::StringLiteral kOptimizer = "fy.optimizer";      // string: adamw, adamw8bit
inline constexpr llvm::StringLiteral kLossScale = "fy.loss_scale";     // string "dynamic", when set
inline constexpr llvm::StringLiteral kBudgetGpuMem = "fy.budget.gpu_mem";  // i64: the program's default --gpu-mem
inline constexpr llvm::StringLiteral kReservedDeviceBytes = "fysched.reserved_device_bytes";  // i64: CUDA runtime's own
// The step's schedule rules, each on unless the compile turns it off (bool false).
inline constexpr llvm::StringLiteral kScheduleRowsFirst = "fy.schedule.rows_first";    // fy-rows-first
inline constexpr llvm::StringLiteral kScheduleParamWaits = "fy.schedule.param_waits";  // fy-param-waits
inline constexpr llvm::StringLiteral kScheduleEarlyHold = "fy.schedule.early_hold";    // fy-early-offload's held hand-over
// Whether a schedule rule is on (not turned off) for `module`.
inline bool scheduleRule(mlir::Operation *module, llvm::StringRef rule) {
  auto on = module->getAttrOfType<mlir::BoolAttr>(rule);
  return !on || on.getValue();
}

// The plan is one attribute, #fysched.plan (dialects/FySched/Dialect.td), with
// accessors: PlanAttr::of(module).

// On the module, from the placement passes.
inline constexpr llvm::StringLiteral kStreamedParams = "fysched.streamed_params";  // unit: weights copied in per phase

// On @train_step, from fy-plan-memory (and fy-place-activations).
inline constexpr llvm::StringLiteral kParamBytes = "fysched.param_bytes";
inline constexpr llvm::StringLiteral kPeakTempBytes = "fysched.peak_temp_bytes";
inline constexpr llvm::StringLiteral kArenaBytes = "fysched.arena_bytes";
inline constexpr llvm::StringLiteral kHostArenaBytes = "fysched.host_arena_bytes";
inline constexpr llvm::StringLiteral kSsdArenaBytes = "fysched.ssd_arena_bytes";
inline constexpr llvm::StringLiteral kRecomputedBytes = "fysched.recomputed_bytes";

} // namespace fuyou::attr

#endif
