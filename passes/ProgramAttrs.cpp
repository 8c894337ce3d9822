// fy-program-attrs: what the compile's flags decide for the program,
// recorded on the module (see Passes.td).
#include "passes/Passes.h"
#include "passes/AttrNames.h"

#include "dialects/FySched/FySchedDialect.h"
#include "runtime/abi/sizes.h"
#include "mlir/IR/BuiltinOps.h"

namespace fuyou {
#define GEN_PASS_DEF_PROGRAMATTRS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;

namespace {

struct ProgramAttrs : fuyou::impl::ProgramAttrsBase<ProgramAttrs> {
  using ProgramAttrsBase::ProgramAttrsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder b(module.getContext());
    module->setAttr(fuyou::attr::kPrecision, b.getStringAttr(precision));
    if (target == "cuda") {
      auto forward = module.lookupSymbol<func::FuncOp>("forward");
      auto ids = forward && forward.getNumArguments() ? dyn_cast<RankedTensorType>(forward.getArgumentTypes()[0])
                                                      : RankedTensorType();
      if (!ids || !ids.hasStaticShape()) {
        module.emitError("fy-program-attrs: @forward's first argument is not a token tensor of a known shape");
        return signalPassFailure();
      }
      const bool sixteenBit = precision == "bf16" || precision == "fp16";
      const size_t reserved = fy::cuda::kMatmulWorkspaceBytes + (sixteenBit ? fy::cuda::kMatmulConvertBytes : 0) +
                              fy::cuda::step_io_bytes(size_t(ids.getNumElements()));
      module->setAttr(fuyou::attr::kReservedDeviceBytes, b.getI64IntegerAttr(int64_t(reserved)));
    }
    module->setAttr(fuyou::attr::kOptimizer, b.getStringAttr(optimizer));
    if (lossScale)
      module->setAttr(fuyou::attr::kLossScale, b.getStringAttr("dynamic"));
    if (gpuMem > 0)
      module->setAttr(fuyou::attr::kBudgetGpuMem, b.getI64IntegerAttr(gpuMem));
    for (auto [on, rule] : {std::pair{bool(rowsFirst), fuyou::attr::kScheduleRowsFirst},
                            {bool(paramWaits), fuyou::attr::kScheduleParamWaits},
                            {bool(earlyHold), fuyou::attr::kScheduleEarlyHold}})
      if (!on)
        module->setAttr(rule, b.getBoolAttr(false));
    if (activations == "auto")
      return;
    fuyou::fysched::PlanAttr::decided(module.getContext(), activations, params, earlyRows == "no" ? "no" : "",
                                      earlyChunks == "all" ? "all" : "", gradLanding > 1 ? int64_t(gradLanding) : 0,
                                      /*writeBehind=*/0, /*given=*/false)
        .setOn(module);
  }
};

} // namespace
