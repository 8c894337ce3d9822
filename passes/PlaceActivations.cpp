// fy-place-activations: where each value that backward needs waits between
// its last forward use and its first backward one. policy=keep leaves every
// such value on the device; policy=host copies each to host memory after
// its last forward use and back before its first backward use, so the
// device holds only what the ops at hand need. Values are the same bits
// either way: only where they wait changes.
#include "passes/Analysis/StepPhases.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <functional>

namespace fuyou {
#define GEN_PASS_DEF_PLACEACTIVATIONS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

// One saved buffer: its last forward use and first backward one, through
// views of it included.
struct Saved {
  fs::AllocOp alloc;
  Operation *lastForward = nullptr, *firstBackward = nullptr;
};

struct PlaceActivations : fuyou::impl::PlaceActivationsBase<PlaceActivations> {
  using PlaceActivationsBase::PlaceActivationsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (policy != "keep" && policy != "host") {
      module.emitError("fy-place-activations: policy must be keep or host, got '") << policy << "'";
      return signalPassFailure();
    }
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || policy == "keep")
      return;
    Block &body = step.getBody().front();
    fuyou::StepPhases phases(body);
    if (!phases.hasBackward())
      return;
    Value loss = fuyou::rootBuffer(cast<func::ReturnOp>(body.getTerminator()).getOperand(0));
    auto backward = [&](Operation *op) { return phases.backward(op); };
    auto pos = [&](Operation *op) { return phases.position(op); };
    // The uses of a buffer, and of the views made of it in forward.
    std::function<void(Value, Saved &)> walk = [&](Value v, Saved &s) {
      for (Operation *user : v.getUsers()) {
        if (isa<func::ReturnOp, fs::DeallocOp>(user))
          continue;
        if (backward(user)) {
          if (!s.firstBackward || pos(user) < pos(s.firstBackward))
            s.firstBackward = user;
          continue;
        }
        if (!s.lastForward || pos(user) > pos(s.lastForward))
          s.lastForward = user;
        if (auto view = dyn_cast<fs::ViewOp>(user))
          walk(view.getResult(), s);
      }
    };
    SmallVector<Saved> saved;
    for (auto alloc : body.getOps<fs::AllocOp>()) {
      auto type = cast<fs::BufferType>(alloc.getType());
      if (backward(alloc) || type.getSpace() != "device" || alloc.getResult() == loss)
        continue;
      Saved s{alloc, alloc, nullptr};
      walk(alloc.getResult(), s);
      if (s.firstBackward)
        saved.push_back(s);
    }

    // Out after the last forward use, back in before the first backward one.
    for (Saved &s : saved) {
      auto type = cast<fs::BufferType>(s.alloc.getType());
      auto hostType = fs::BufferType::get(type.getContext(), "host", type.getTensorType());
      Location loc = s.alloc.getLoc();
      OpBuilder b(s.lastForward->getContext());
      b.setInsertionPointAfter(s.lastForward);
      Value host = b.create<fs::AllocOp>(loc, hostType, /*offset=*/IntegerAttr());
      b.create<fs::CopyOp>(loc, s.alloc.getResult(), host);
      b.setInsertionPoint(s.firstBackward);
      Value back = b.create<fs::AllocOp>(loc, type, /*offset=*/IntegerAttr());
      b.create<fs::CopyOp>(loc, host, back);
      phases.rebaseBackward(s.alloc.getResult(), back, b);
    }
  }
};

} // namespace
