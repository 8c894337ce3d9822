#ifndef FUYOU_PASSES_PASSES_H
#define FUYOU_PASSES_PASSES_H

#include "dialects/FyGraph/FyGraphOps.h"
#include "dialects/FySched/FySchedOps.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

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

// fuyou-compile's options as a pipeline's (the same names as its flags).
struct TrainPipelineOptions : mlir::PassPipelineOptions<TrainPipelineOptions> {
  template <class T> using Opt = Option<T>;
  Opt<std::string> until{*this, "until", llvm::cl::desc("fygraph, fysched (planned) or emitc"),
                         llvm::cl::init("emitc")};
  Opt<std::string> target{*this, "target", llvm::cl::desc("cpu or cuda"), llvm::cl::init("cpu")};
  Opt<std::string> precision{*this, "precision", llvm::cl::desc("bf16, fp16, tf32 or fp32"), llvm::cl::init("fp32")};
  Opt<std::string> optimizer{*this, "optimizer", llvm::cl::desc("adamw or adamw8bit"), llvm::cl::init("adamw")};
  Opt<bool> lossScale{*this, "loss-scale", llvm::cl::desc("dynamic loss scaling"), llvm::cl::init(false)};
  Opt<int64_t> maxGroupBytes{*this, "max-group-bytes", llvm::cl::desc("bound on a layer group's bytes (0: none)"),
                             llvm::cl::init(0)};
  Opt<int64_t> deviceOptimizer{*this, "device-optimizer",
                               llvm::cl::desc("layer groups at the step's boundary updated on the GPU (-1: auto)"),
                               llvm::cl::init(0)};
  Opt<bool> syncOptimizer{*this, "sync-optimizer", llvm::cl::desc("AdamW inline, not overlapped"),
                          llvm::cl::init(false)};
  Opt<int64_t> prefetchState{*this, "prefetch-state", llvm::cl::desc("updates ahead a group's state is read"),
                             llvm::cl::init(3)};
  Opt<std::string> activations{*this, "activations", llvm::cl::desc("the placement, or auto"),
                               llvm::cl::init("keep")};
  Opt<std::string> params{*this, "params", llvm::cl::desc("keep, stream or auto"), llvm::cl::init("keep")};
  Opt<int64_t> gpuMem{*this, "gpu-mem", llvm::cl::desc("device budget in bytes (0: none)"), llvm::cl::init(0)};
  Opt<int64_t> cpuMem{*this, "cpu-mem", llvm::cl::desc("host budget in bytes (0: none)"), llvm::cl::init(0)};
  Opt<std::string> profile{*this, "profile", llvm::cl::desc("the planner's profile (empty: built-in)")};
  Opt<std::string> kernelTimes{*this, "kernel-times", llvm::cl::desc("a program's trace for kernel times")};
  Opt<std::string> planSearch{*this, "plan-search", llvm::cl::desc("classes or exhaustive"),
                              llvm::cl::init("classes")};
  Opt<std::string> state{*this, "state", llvm::cl::desc("ssd, memory or auto"), llvm::cl::init("auto")};
  Opt<int64_t> ssdReadAhead{*this, "ssd-read-ahead", llvm::cl::init(4)};
  Opt<int64_t> ssdWriteBehind{*this, "ssd-write-behind", llvm::cl::init(0)};
  Opt<int64_t> paramPrefetch{*this, "param-prefetch", llvm::cl::init(0)};
  Opt<int64_t> copyWindow{*this, "copy-window", llvm::cl::init(4)};
  Opt<int64_t> activationPrefetch{*this, "activation-prefetch", llvm::cl::init(0)};
  Opt<int64_t> gradLanding{*this, "grad-landing", llvm::cl::init(0)};
  Opt<std::string> earlyRows{*this, "early-rows", llvm::cl::init("auto")};
  Opt<std::string> earlyChunks{*this, "early-chunks", llvm::cl::init("auto")};
  Opt<bool> rowsFirst{*this, "rows-first", llvm::cl::desc("fy-rows-first"), llvm::cl::init(true)};
  Opt<bool> paramWaits{*this, "param-waits", llvm::cl::desc("fy-param-waits"), llvm::cl::init(true)};
  Opt<bool> earlyHold{*this, "early-hold", llvm::cl::desc("fy-early-offload's held hand-over"), llvm::cl::init(true)};
  Opt<std::string> fuse{*this, "fuse",
                        llvm::cl::desc("fy-recompose's fused attention, loss, SwiGLU and RoPE: yes (where the target's "
                                       "kernels are measured), no, or all (the CUDA target's new kernels too)"),
                        llvm::cl::init("yes")};
  Opt<std::string> halfActivations{*this, "half-activations",
                                   llvm::cl::desc("activations in 16 bits at bf16/fp16: auto (the CPU target), "
                                                  "yes or no"),
                                   llvm::cl::init("auto")};
};

// Whether fy-half-activations runs: at bf16 or fp16, on the CPU target or
// when asked for (the CUDA target's casts have not run on a GPU yet).
bool halfActivations(const TrainPipelineOptions &o);

// Whether an --activations value sends any segment to SSD.
bool namesSsd(llvm::StringRef activations);
// The imported graph to the layer groups (with until=fygraph: the fused graph).
void addFrontPasses(mlir::OpPassManager &pm, const TrainPipelineOptions &o);
// The layer groups to the planned step (and its EmitC unless until=fysched),
// with the AdamW of device-optimizer groups on the device (-1: the fastest,
// fy-choose-device-optimizer).
void addBackPasses(mlir::OpPassManager &pm, const TrainPipelineOptions &o);
// fuyou-opt's --fy-train-pipeline: the two in turn.
void registerTrainPipeline();

} // namespace fuyou

#endif
