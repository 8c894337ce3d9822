// The discardable attributes the passes, the cost model and the EmitC
// conversion hand each other, declared once: each name, what it holds and
// who writes it. (The plan is still a set of attributes; one ODS attribute
// with accessors would replace the fy.plan.* group.)
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

// On the module, the plan: given (fy-program-attrs) or chosen (fy-choose-placement,
// fy-choose-device-optimizer); read by the placement passes and --emit=plan.
inline constexpr llvm::StringLiteral kPlanActivations = "fy.plan.activations";  // string: a policy, or one per segment
inline constexpr llvm::StringLiteral kPlanParams = "fy.plan.params";            // string: keep or stream
inline constexpr llvm::StringLiteral kPlanEarlyRows = "fy.plan.early_rows";     // string "no": a tied table's rows not early
inline constexpr llvm::StringLiteral kPlanEarlyChunks = "fy.plan.early_chunks"; // string "all": sent down at once
inline constexpr llvm::StringLiteral kPlanGradLanding = "fy.plan.grad_landing"; // i64: fy-grad-landed's distance
inline constexpr llvm::StringLiteral kPlanWriteBehind = "fy.plan.write_behind"; // i64: SSD writes in flight
inline constexpr llvm::StringLiteral kPlanGiven = "fy.plan.given";              // unit: placed as given, not searched
inline constexpr llvm::StringLiteral kPlanEvaluated = "fy.plan.evaluated";      // i64: plans the planner carried out
inline constexpr llvm::StringLiteral kPlanPredictedStepS = "fy.plan.predicted_step_s";
inline constexpr llvm::StringLiteral kPlanUniform = "fy.plan.uniform";          // string: "policy/params" of the best uniform plan
inline constexpr llvm::StringLiteral kPlanUniformStepS = "fy.plan.uniform_step_s";
inline constexpr llvm::StringLiteral kPlanLowerBoundS = "fy.plan.lower_bound_s";
inline constexpr llvm::StringLiteral kPlanProfile = "fy.plan.profile";          // string: the profile planned with
inline constexpr llvm::StringLiteral kPlanState = "fy.plan.state";              // string: where the moments were taken to be
inline constexpr llvm::StringLiteral kPlanDeviceGroups = "fy.plan.device_groups";  // i64: --device-optimizer auto's N
inline constexpr llvm::StringLiteral kPlanDeviceStepS = "fy.plan.device_step_s";
inline constexpr llvm::StringLiteral kPlanDeviceNoneStepS = "fy.plan.device_none_step_s";

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
