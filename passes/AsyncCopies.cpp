// fy-async-copies: a copy between host and device, or from host memory to
// SSD, no longer holds up the kernels after it. It gets a token, and the
// program waits for it only where it next needs it done: before an op
// touches the target, writes the source or frees either. A source freed
// before that point stays allocated until the wait (the copy still reads
// it): for `window` launches (0: the wait comes right after the copy, which
// then overlaps only the host's work), or, for an SSD write, until
// `write-behind` more SSD writes have started, so that one write queued
// behind other I/O does not stop the next activation's way out.
#include "passes/Analysis/StepPhases.h"
#include "passes/AttrNames.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace fuyou {
#define GEN_PASS_DEF_ASYNCCOPIES
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

// `root` and every view of it: the values that name its storage.
llvm::SmallPtrSet<Value, 8> storageOf(Value root) {
  llvm::SmallPtrSet<Value, 8> names{root};
  SmallVector<Value> work{root};
  while (!work.empty())
    for (Operation *user : work.pop_back_val().getUsers())
      if (auto view = dyn_cast<fs::ViewOp>(user); view && names.insert(view.getResult()).second)
        work.push_back(view.getResult());
  return names;
}

using fuyou::spaceOf;

bool hostDevice(fs::CopyOp copy) {
  StringRef from = spaceOf(copy.getSource()), to = spaceOf(copy.getTarget());
  return (from == "host" && to == "device") || (from == "device" && to == "host");
}

bool ssdWrite(Operation *op) {
  auto copy = dyn_cast<fs::CopyOp>(op);
  return copy && spaceOf(copy.getSource()) == "host" && spaceOf(copy.getTarget()) == "ssd";
}

struct AsyncCopies : fuyou::impl::AsyncCopiesBase<AsyncCopies> {
  using AsyncCopiesBase::AsyncCopiesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (window < 0) {
      module.emitError("fy-async-copies: window must be at least 0, got ") << int64_t(window);
      return signalPassFailure();
    }
    if (writeBehind < 0) {
      module.emitError("fy-async-copies: write-behind must be at least 0, got ") << int64_t(writeBehind);
      return signalPassFailure();
    }
    writeBehind_ = writeBehind;
    if (writeBehind_ == 0) {  // the planner's choice, else the default
      auto plan = fuyou::fysched::PlanAttr::of(module);
      writeBehind_ = plan && plan.getWriteBehind() > 0 ? plan.getWriteBehind() : 4;
    }
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return;
    for (auto group : module.getOps<fs::GroupOp>())
      for (Attribute p : group.getParams())
        groupOf_[cast<FlatSymbolRefAttr>(p).getValue()] = group.getSymName();
    Block &body = step.getBody().front();
    fuyou::StepPhases phases(body);  // of the ops as they were: the copies made here are not in it
    SmallVector<fs::CopyOp> copies;
    for (auto copy : body.getOps<fs::CopyOp>())
      if (!copy.getToken() && (hostDevice(copy) || ssdWrite(copy)))
        copies.push_back(copy);
    for (fs::CopyOp copy : copies)
      makeAsync(copy, phases);
  }

  void makeAsync(fs::CopyOp copy, const fuyou::StepPhases &phases) {
    Value source = fuyou::rootBuffer(copy.getSource());
    auto src = storageOf(source), dst = storageOf(fuyou::rootBuffer(copy.getTarget()));
    // A host master read by the copy changes when its parameter is updated.
    auto master = source.getDefiningOp<fs::GetParamOp>();
    auto updates = [&](Operation *op) {
      if (!master)
        return false;
      if (auto adamw = dyn_cast<fs::CpuAdamWOp>(op))
        return adamw.getParam() == master.getName();
      if (auto off = dyn_cast<fs::GradOffloadOp>(op))
        return groupOf_.lookup(master.getName()) == off.getGroup();
      return false;
    };
    auto writes = [&](Operation *op) {
      if (auto launch = dyn_cast<fs::LaunchOp>(op))
        return llvm::any_of(launch.getOuts(), [&](Value v) { return src.contains(v); });
      if (auto other = dyn_cast<fs::CopyOp>(op))
        return src.contains(other.getTarget());
      return updates(op);
    };
    auto touches = [&](Operation *op) {
      return !isa<fs::ViewOp>(op) && llvm::any_of(op->getOperands(), [&](Value v) { return dst.contains(v); });
    };

    // The window bounds only how long a freed source is held: a copy from a
    // buffer that lives on (a master) waits at its first conflict. An SSD
    // write's is counted in the SSD writes after it, not in launches: the
    // wait for one goes before the write-behind-th next, and forward's last
    // ones are waited for where backward starts (their reads come first).
    const bool toSsd = ssdWrite(copy);
    SmallVector<Operation *> frees;  // of the source, before the wait
    Operation *at = copy->getNextNode();
    for (int64_t launches = 0, writesAfter = 0; toSsd || window > 0; at = at->getNextNode()) {
      auto dealloc = dyn_cast<fs::DeallocOp>(at);
      if (dealloc && src.contains(dealloc.getBuffer()) && !dst.contains(dealloc.getBuffer())) {
        if (!toSsd && launches >= window)
          break;
        frees.push_back(at);
        continue;
      }
      if (at->hasTrait<OpTrait::IsTerminator>() || touches(at) || writes(at))
        break;
      if (toSsd && phases.contains(at) && phases.backward(at))
        break;
      if (toSsd ? ssdWrite(at) && ++writesAfter >= writeBehind_ && !frees.empty()
                : isa<fs::LaunchOp>(at) && ++launches > window && !frees.empty())
        break;
    }

    OpBuilder b(copy);
    auto async = b.create<fs::CopyOp>(copy.getLoc(), fs::TokenType::get(b.getContext()), copy.getSource(),
                                      copy.getTarget());
    copy.erase();
    b.setInsertionPoint(at);
    b.create<fs::WaitOp>(async.getLoc(), async.getToken());
    for (Operation *f : frees)
      f->moveBefore(at);
  }

  llvm::StringMap<StringRef> groupOf_;  // parameter -> its layer group
  int64_t writeBehind_ = 4;
};

} // namespace
