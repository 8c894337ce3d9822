// fy-device-optimizer: the groups at the step's boundary keep their AdamW
// inline and run it on the device (see Passes.td).
#include "passes/Passes.h"
#include "passes/AttrNames.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringSet.h"

namespace fuyou {
#define GEN_PASS_DEF_DEVICEOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

struct DeviceOptimizer : fuyou::impl::DeviceOptimizerBase<DeviceOptimizer> {
  using DeviceOptimizerBase::DeviceOptimizerBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (last < 0) {
      module.emitError("fy-device-optimizer: last must be >= 0, got ") << last;
      return signalPassFailure();
    }
    if (last == 0)
      return;
    // The device's update is the plain step: a skipped step (loss scaling)
    // or 8-bit moments would need their own kernels.
    if (module->hasAttr(fuyou::attr::kLossScale)) {
      module.emitError("fy-device-optimizer: not with dynamic loss scaling");
      return signalPassFailure();
    }
    if (auto opt = module->getAttrOfType<StringAttr>(fuyou::attr::kOptimizer); opt && opt.getValue() != "adamw") {
      module.emitError("fy-device-optimizer: only with the adamw optimizer, not ") << opt.getValue();
      return signalPassFailure();
    }
    SmallVector<fs::GroupOp> groups(module.getOps<fs::GroupOp>());
    llvm::StringSet<> onDevice;
    for (size_t i = groups.size() - std::min<size_t>(groups.size(), size_t(last)); i < groups.size(); ++i) {
      groups[i].setOnDevice(true);
      onDevice.insert(groups[i].getSymName());
    }
    module.walk([&](fs::CpuAdamWOp op) {
      if (op.getGroup() && onDevice.contains(*op.getGroup()))
        op.setOnDevice(true);
    });
  }
};

} // namespace
