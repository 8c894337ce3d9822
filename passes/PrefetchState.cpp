// fy-prefetch-state: each group's optimizer-state read goes `distance`
// updates ahead of the group_adamw that consumes it, so the SSD read hides
// behind the backward and the updates that come first.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace fuyou {
#define GEN_PASS_DEF_PREFETCHSTATE
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

struct PrefetchState : fuyou::impl::PrefetchStateBase<PrefetchState> {
  using PrefetchStateBase::PrefetchStateBase;

  void runOnOperation() override {
    if (distance < 0) {
      getOperation().emitError("fy-prefetch-state: distance must be at least 0");
      return signalPassFailure();
    }
    auto step = getOperation().lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return;
    // The updates in program order, each with the read it depends on.
    SmallVector<std::pair<fs::GroupAdamWOp, fs::StateReadOp>> updates;
    for (auto update : step.getBody().front().getOps<fs::GroupAdamWOp>()) {
      fs::StateReadOp read;
      for (Value dep : update.getDeps())
        if (auto r = dep.getDefiningOp<fs::StateReadOp>())
          read = r;
      updates.push_back({update, read});
    }
    Block &body = step.getBody().front();
    // Reads that go to the start keep their relative order.
    Operation *startAnchor = nullptr;
    for (auto [k, entry] : llvm::enumerate(updates)) {
      fs::StateReadOp read = entry.second;
      if (!read || distance == 0)
        continue;
      if (int64_t(k) < distance) {
        if (startAnchor)
          read->moveAfter(startAnchor);
        else
          read->moveBefore(&body.front());
        startAnchor = read;
      } else {
        read->moveAfter(updates[k - size_t(distance)].first);
      }
    }
  }
};

} // namespace
