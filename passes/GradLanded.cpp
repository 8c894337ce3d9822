// fy-grad-landed: where the memory of each group's gradients may be used
// again. grad_offload only starts their copy to the host; kernels that
// reuse the memory must come after it has landed, so on a GPU they wait at
// the fysched.grad_landed placed here. The later it goes, the less the
// kernels wait and the longer the gradients hold their memory.
#include "passes/Passes.h"
#include "passes/AttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace fuyou {
#define GEN_PASS_DEF_GRADLANDED
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

struct GradLanded : fuyou::impl::GradLandedBase<GradLanded> {
  using GradLandedBase::GradLandedBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t n = distance;
    if (n == 0) {
      auto plan = fuyou::fysched::PlanAttr::of(module);
      n = plan && plan.getGradLanding() > 0 ? plan.getGradLanding() : 1;
    }
    if (n < 1) {
      module.emitError("fy-grad-landed: distance must be at least 1, got ") << n;
      return signalPassFailure();
    }
    module.walk([&](func::FuncOp f) {
      for (Block &body : f.getBody())
        place(body, n);
    });
  }

  // Right after the grad_offload n later, else before the terminator.
  void place(Block &body, int64_t n) {
    SmallVector<fs::GradOffloadOp> offs(body.getOps<fs::GradOffloadOp>());
    OpBuilder b(&getContext());
    for (auto [k, off] : llvm::enumerate(offs)) {
      if (llvm::any_of(off.getToken().getUsers(), [](Operation *u) { return isa<fs::GradLandedOp>(u); }))
        continue;  // placed already
      if (k + n < offs.size())
        b.setInsertionPointAfter(offs[k + n]);
      else
        b.setInsertionPoint(body.getTerminator());
      b.create<fs::GradLandedOp>(off.getLoc(), off.getGroupAttr(), off.getToken());
    }
  }
};

} // namespace
