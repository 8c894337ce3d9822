// fy-stream-params: where the parameters' working copies live. policy=keep
// leaves every parameter resident on the device for the whole run;
// policy=stream keeps none there: each is copied from its host master into
// a device buffer `ahead` launches before its first forward use and again
// before its first backward use, and that buffer ends after the phase's last use
// (fy-insert-dealloc), so the device holds only the weights of the ops at
// hand. The copies are the masters' bits: results do not change.
#include "passes/Analysis/StepPhases.h"
#include "passes/AttrNames.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <functional>

namespace fuyou {
#define GEN_PASS_DEF_STREAMPARAMS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

struct StreamParams : fuyou::impl::StreamParamsBase<StreamParams> {
  using StreamParamsBase::StreamParamsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string chosen = policy;
    if (chosen == "auto") {
      auto plan = fuyou::fysched::PlanAttr::of(module);
      if (!plan) {
        module.emitError("fy-stream-params: policy=auto needs fy-choose-placement first (no fysched.plan)");
        return signalPassFailure();
      }
      chosen = plan.getParams().str();
    }
    if (chosen != "keep" && chosen != "stream") {
      module.emitError("fy-stream-params: policy must be keep or stream, got '") << chosen << "'";
      return signalPassFailure();
    }
    if (ahead < 0) {
      module.emitError("fy-stream-params: ahead must be at least 0, got ") << int64_t(ahead);
      return signalPassFailure();
    }
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || chosen == "keep")
      return;
    module->setAttr(fuyou::attr::kStreamedParams, UnitAttr::get(&getContext()));
    Block &body = step.getBody().front();
    fuyou::StepPhases phases(body);  // no loss written: all is forward

    SmallVector<fs::GetParamOp> params;
    for (auto gp : body.getOps<fs::GetParamOp>())
      if (cast<fs::BufferType>(gp.getType()).getSpace() == "device")
        params.push_back(gp);
    // A master is final for the step after its group's group_wait (the
    // background update of the step before): no forward copy goes above it.
    llvm::StringMap<Operation *> settledAt;
    for (auto wait : body.getOps<fs::GroupWaitOp>())
      if (auto param = wait.getParam())
        settledAt[*param] = wait;
      else if (auto group = module.lookupSymbol<fs::GroupOp>(wait.getGroupAttr()))
        for (Attribute p : group.getParams())
          settledAt[cast<FlatSymbolRefAttr>(p).getValue()] = wait;
    for (fs::GetParamOp gp : params) {
      // The first user of each phase and forward's last, views' users included.
      Operation *firstFwd = nullptr, *firstBwd = nullptr, *lastFwd = nullptr;
      std::function<void(Value)> scan = [&](Value v) {
        for (Operation *user : v.getUsers()) {
          bool bwd = phases.backward(user);
          Operation *&first = bwd ? firstBwd : firstFwd;
          if (!first || phases.position(user) < phases.position(first))
            first = user;
          if (!bwd && (!lastFwd || phases.position(user) > phases.position(lastFwd)))
            lastFwd = user;
          if (auto view = dyn_cast<fs::ViewOp>(user))
            scan(view.getResult());
        }
      };
      scan(gp.getResult());
      auto type = cast<fs::BufferType>(gp.getType());
      auto hostType = fs::BufferType::get(type.getContext(), "host", type.getTensorType());
      OpBuilder b(gp);
      // `ahead` launches before `use`, but after `floor` (none: the step's start).
      auto issueAt = [&](Operation *use, Operation *floor) {
        return fuyou::issuePoint(use, ahead, [&](Operation *op) { return op == floor; });
      };
      if (!firstFwd && !firstBwd) {
        gp.erase();
        continue;
      }
      Operation *settled = settledAt.lookup(gp.getName());
      Operation *fwdAt = firstFwd ? issueAt(firstFwd, settled) : nullptr;
      Operation *bwdAt = firstBwd ? issueAt(firstBwd, lastFwd ? lastFwd : settled) : nullptr;
      // The master is read where the first copy is issued.
      b.setInsertionPoint(fwdAt ? fwdAt : bwdAt);
      Value master = b.create<fs::GetParamOp>(gp.getLoc(), hostType, gp.getNameAttr());
      auto fetch = [&](Operation *before) {
        b.setInsertionPoint(before);
        Value d = b.create<fs::AllocOp>(gp.getLoc(), type, /*offset=*/IntegerAttr());
        b.create<fs::CopyOp>(gp.getLoc(), master, d);
        return d;
      };
      if (bwdAt)  // views backward reads are made again after the copy
        phases.rebaseBackward(gp.getResult(), fetch(bwdAt), b);
      if (fwdAt)
        gp.getResult().replaceAllUsesWith(fetch(fwdAt));
      gp.erase();
    }
  }
};

} // namespace
