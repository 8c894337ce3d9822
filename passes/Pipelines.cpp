// The compile as named pipelines: fuyou-compile runs them, fuyou-opt replays
// them (--fy-train-pipeline), and the planner's trial runs carry out a plan
// with the same placement passes.
#include "passes/Passes.h"
#include "runtime/abi/sizes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace fuyou {

void addPlacementPasses(mlir::OpPassManager &pm, const PlacementOptions &o) {
  PlaceActivationsOptions place;
  place.policy = o.activations;
  place.readAhead = o.readAhead;
  place.ahead = o.activationPrefetch;
  pm.addPass(createPlaceActivations(place));
  StreamParamsOptions stream;
  stream.policy = o.params;
  stream.ahead = o.paramPrefetch;
  pm.addPass(createStreamParams(stream));
  RowsFirstOptions rows;
  rows.ahead = o.paramPrefetch;
  pm.addPass(createRowsFirst(rows));
  pm.addPass(createParamWaits());
  pm.addPass(createEarlyOffload());
  GradLandedOptions landed;
  landed.distance = o.gradLanding;
  pm.addPass(createGradLanded(landed));
  pm.addPass(createInsertDealloc());
  AsyncCopiesOptions copies;
  copies.window = o.copyWindow;
  copies.writeBehind = o.writeBehind;
  pm.addPass(createAsyncCopies(copies));
  pm.addPass(createPlanMemory());
}

bool namesSsd(llvm::StringRef activations) {
  return ("," + activations + ",").str().find(",ssd,") != std::string::npos;
}

bool halfActivations(const TrainPipelineOptions &o) {
  if (o.precision != "bf16" && o.precision != "fp16")
    return false;
  return o.halfActivations == "yes" || (o.halfActivations == "auto" && o.target == "cpu");
}

void addFrontPasses(mlir::OpPassManager &pm, const TrainPipelineOptions &o) {
  ProgramAttrsOptions attrs;
  attrs.precision = o.precision;
  attrs.optimizer = o.optimizer;
  attrs.lossScale = o.lossScale;
  attrs.gpuMem = o.gpuMem;
  attrs.target = o.target;
  attrs.rowsFirst = o.rowsFirst;
  attrs.paramWaits = o.paramWaits;
  attrs.earlyHold = o.earlyHold;
  if (o.until != "fygraph") {  // (the graph alone has no placement yet)
    attrs.activations = o.activations;
    attrs.params = o.params;
    attrs.earlyRows = o.earlyRows;
    attrs.earlyChunks = o.earlyChunks;
    attrs.gradLanding = o.gradLanding;
  }
  pm.addPass(createProgramAttrs(attrs));
  RecomposeOptions recompose;
  // The CPU's kernels round their products' operands at --precision
  // bf16|fp16 as matmul does, so they serve every precision. The CUDA
  // target's are formed only when asked for by name until a GPU has
  // measured them.
  const bool cpu = o.target == "cpu";
  recompose.attention = (o.fuse == "yes" && cpu) || (o.fuse == "all" && (cpu || o.target == "cuda"));
  recompose.crossEntropy = recompose.attention;
  // SwiGLU's and RoPE's kernels multiply no matrices, so the CPU's serve every precision.
  recompose.swiglu = (o.fuse == "yes" && o.target == "cpu") || o.fuse == "all";
  recompose.rope = recompose.swiglu;
  if (o.target == "cuda")
    recompose.attentionMaxHeadDim = fy::cuda::kAttentionMaxHeadDim;
  pm.addPass(createRecompose(recompose));
  // One product for a SwiGLU's gate and up: other bits (larger products),
  // so only where every fusion is asked for.
  if (o.fuse == "all")
    pm.addPass(createPackSwiGLU());
  pm.addPass(mlir::createCanonicalizerPass());
  if (o.until == "fygraph")
    return;
  AutodiffOptions autodiff;
  autodiff.lossScale = o.lossScale;
  pm.addPass(createAutodiff(autodiff));
  if (o.fuse != "no")
    pm.addPass(createConcatSliceGrads());
  // A Linear's bias in its product's kernel, and a norm's input gradient
  // added in its kernel: on the CPU the two kernels' bits; on the CUDA
  // target (cuBLASLt's epilogue, the norms' kernels) with the new kernels.
  if (o.fuse == "all" || (o.fuse == "yes" && o.target == "cpu")) {
    pm.addPass(createFuseBias());
    pm.addPass(createFuseNormGradAdd());
  }
  pm.addPass(createInsertAdamW());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(createLowerToFySched());
  if (halfActivations(o)) {
    HalfActivationsOptions half;
    half.dtype = o.precision;
    // Kernels that take 16-bit operands and results as they are: both
    // targets' matmul (the CPU widens and narrows them itself, cuBLASLt
    // reads them), and on the GPU the elementwise, norm and attention
    // kernels, which load and store them (kernels/cuda/half.cuh), and slice
    // and concat, which convert as they move, and the loss of a Linear's
    // logits, which holds them in 16 bits. (The option is an ArrayRef:
    // its strings must outlive the pass's creation.)
    static const std::vector<std::string> cpuNative = {"matmul", "matmul_bias"};
    static const std::vector<std::string> cudaNative = [] {
      std::vector<std::string> k = {"matmul", "matmul_bias", "add", "sub", "mul", "div", "pow",
                                    "swiglu", "swiglu_grad", "layer_norm", "layer_norm_nobias",
                                    "layer_norm_grad", "layer_norm_grad_add", "rms_norm", "rms_norm_grad",
                                    "rms_norm_grad_add", "attention",
                                    "attention_grad", "attention_qkv", "attention_qkv_grad", "slice",
                                    "slice_grad", "concat", "rope", "linear_cross_entropy", "swiglu_packed",
                                    "swiglu_packed_grad"};
      for (const char *u : {"neg", "sqrt", "reciprocal", "exp", "tanh", "erf", "sigmoid", "silu", "gelu",
                            "gelu_tanh"}) {
        k.push_back(u);
        k.push_back(std::string("unary_grad_") + u);
      }
      for (const char *b : {"bias_gelu", "bias_gelu_tanh"}) {
        k.push_back(b);
        k.push_back(std::string(b) + "_grad");
      }
      return k;
    }();
    half.native = o.target == "cuda" ? cudaNative : cpuNative;
    // cuBLASLt reads 16-bit operands as they are and rounds fp32 ones into
    // copies first; the CPU widens both to fp32 for its sgemm.
    half.productCopies = o.target == "cuda";
    pm.addPass(createHalfActivations(half));
    if (half.productCopies)
      pm.addPass(createFuseBiasGradSum());
  }
  PartitionGroupsOptions groups;
  groups.maxBytes = o.maxGroupBytes;
  pm.addPass(createPartitionGroups(groups));
}

// The passes after fy-device-optimizer, up to the planned step.
static void addPlannedPasses(mlir::OpPassManager &pm, const TrainPipelineOptions &o) {
  if (!o.syncOptimizer) {
    pm.addPass(createAsyncOptimizer());
    PrefetchStateOptions prefetch;
    prefetch.distance = o.prefetchState;
    pm.addPass(createPrefetchState(prefetch));
  }
  // The planner also runs for a placement given with activations on SSD,
  // to choose how many of their writes are in flight.
  if (o.activations == "auto" || (namesSsd(o.activations) && o.ssdWriteBehind == 0)) {
    ChoosePlacementOptions choose;
    choose.activations = o.activations;
    choose.gpuMem = o.gpuMem;
    choose.cpuMem = o.cpuMem;
    choose.profile = o.profile;
    choose.kernelTimes = o.kernelTimes;
    choose.readAhead = o.ssdReadAhead;
    choose.paramPrefetch = o.paramPrefetch;
    choose.copyWindow = o.copyWindow;
    choose.writeBehind = o.ssdWriteBehind;
    choose.activationPrefetch = o.activationPrefetch;
    choose.target = o.target;
    choose.search = o.planSearch;
    choose.earlyRows = o.earlyRows;
    choose.earlyChunks = o.earlyChunks;
    choose.gradLanding = o.gradLanding;
    choose.params = o.params;
    choose.state = o.state;
    pm.addPass(createChoosePlacement(choose));
  }
  PlacementOptions place;
  place.activations = o.activations;
  place.params = o.params;
  place.readAhead = o.ssdReadAhead;
  place.paramPrefetch = o.paramPrefetch;
  place.copyWindow = o.copyWindow;
  place.writeBehind = o.ssdWriteBehind;
  place.activationPrefetch = o.activationPrefetch;
  place.gradLanding = o.gradLanding;
  addPlacementPasses(pm, place);
  pm.addPass(createOutlineEval());  // the program's --val-data
}

void addBackPasses(mlir::OpPassManager &pm, const TrainPipelineOptions &o) {
  if (o.until == "fygraph")
    return;
  if (o.deviceOptimizer < 0) {  // auto: the planned step for each number of groups, priced
    ChooseDeviceOptimizerOptions choose;
    llvm::SmallVector<mlir::OpPassManager, 1> rest;
    rest.emplace_back("builtin.module");
    addPlannedPasses(rest.front(), o);
    choose.rest = rest;  // (copied into the pass, below)
    choose.gpuMem = o.gpuMem;
    choose.cpuMem = o.cpuMem;
    choose.profile = o.profile;
    choose.kernelTimes = o.kernelTimes;
    choose.target = o.target;
    pm.addPass(createChooseDeviceOptimizer(choose));
  } else {
    DeviceOptimizerOptions device;
    device.last = o.deviceOptimizer;
    pm.addPass(createDeviceOptimizer(device));
    addPlannedPasses(pm, o);
  }
  if (o.until == "emitc")
    pm.addPass(createConvertFySchedToEmitC());
}

void registerTrainPipeline() {
  mlir::PassPipelineRegistration<TrainPipelineOptions>(
      "fy-train-pipeline",
      "fuyou-compile's passes, from the imported graph to the program's EmitC (or to fygraph or the planned "
      "fysched with until=)",
      [](mlir::OpPassManager &pm, const TrainPipelineOptions &o) {
        addFrontPasses(pm, o);
        addBackPasses(pm, o);
      });
}

} // namespace fuyou
