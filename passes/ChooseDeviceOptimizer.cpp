// fy-choose-device-optimizer: how many layer groups' AdamW runs on the GPU,
// chosen by carrying out and pricing each (see Passes.td).
#include "passes/Passes.h"
#include "passes/AttrNames.h"

#include "passes/Analysis/CostModel.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"

namespace fuyou {
#define GEN_PASS_DEF_CHOOSEDEVICEOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;

namespace {

// The numbers of groups tried, in increasing order: 0 to 4, then powers of
// two, then all but one and all (Passes.td says why), none past `most`.
SmallVector<int64_t> candidates(int64_t groups, int64_t most) {
  const int64_t top = most < 0 ? groups : std::min(most, groups);
  SmallVector<int64_t> ns;
  for (int64_t n = 0; n <= std::min<int64_t>(4, top); ++n)
    ns.push_back(n);
  for (int64_t n = 8; n < top - 1; n *= 2)
    ns.push_back(n);
  for (int64_t n : {top - 1, top})
    if (n > ns.back())
      ns.push_back(n);
  return ns;
}

struct ChooseDeviceOptimizer : fuyou::impl::ChooseDeviceOptimizerBase<ChooseDeviceOptimizer> {
  using ChooseDeviceOptimizerBase::ChooseDeviceOptimizerBase;

  // fy-device-optimizer with `last` n, then the rest, on `module`.
  LogicalResult carryOut(ModuleOp module, int64_t n) {
    PassManager pm(module.getContext());
    fuyou::DeviceOptimizerOptions device;
    device.last = n;
    pm.addPass(fuyou::createDeviceOptimizer(device));
    if (failed(pm.run(module)))
      return failure();
    for (const OpPassManager &part : rest) {
      PassManager after(module.getContext());
      static_cast<OpPassManager &>(after) = part;
      if (failed(after.run(module)))
        return failure();
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    fuyou::Profile prof;
    if (std::string err = fuyou::loadPlanProfile(profile, target, kernelTimes, prof); !err.empty()) {
      module.emitError("fy-choose-device-optimizer: ") << err;
      return signalPassFailure();
    }
    const int64_t groups = llvm::range_size(module.getOps<fuyou::fysched::GroupOp>());
    OwningOpRef<ModuleOp> chosen;
    int64_t chosenN = 0;
    double best = -1, none = -1;
    for (int64_t n : candidates(groups, most)) {
      OwningOpRef<ModuleOp> trial = module.clone();
      bool ok;
      {
        // A trial that fits no budget is not the compilation's error.
        ScopedDiagnosticHandler quiet(ctx, [](Diagnostic &) { return success(); });
        ok = succeeded(carryOut(*trial, n));
      }
      // Past 4, one that does not fit ends the search: more groups hold more
      // moments on the device.
      if (!ok) {
        if (n > 4)
          break;
        continue;
      }
      fuyou::Prediction p = fuyou::predictStep(*trial, prof, /*stateOnSsd=*/false);
      if ((gpuMem > 0 && p.deviceBytes > gpuMem) || (cpuMem > 0 && p.hostBytes > cpuMem)) {
        if (n > 4)
          break;
        continue;
      }
      if (n == 0)
        none = p.stepS;
      if (best < 0 || p.stepS < best)
        best = p.stepS, chosenN = n, chosen = std::move(trial);
    }
    if (!chosen) {  // none fits: none at all, whose error says why
      OwningOpRef<ModuleOp> trial = module.clone();
      if (failed(carryOut(*trial, 0)))
        return signalPassFailure();
      chosen = std::move(trial);
    }
    module.getBodyRegion().takeBody(chosen->getBodyRegion());
    module->setAttrs((*chosen)->getAttrDictionary());
    if (best < 0)
      return;  // (N = 0 carried out without a budget that fits: the later check says so)
    auto plan = fuyou::fysched::PlanAttr::of(module);
    if (!plan)
      plan = fuyou::fysched::PlanAttr::decided(ctx, "", "keep", "", "", 0, 0, false);
    plan.withDevice(chosenN, best, none >= 0 ? none : NAN).setOn(module);
  }
};

} // namespace
