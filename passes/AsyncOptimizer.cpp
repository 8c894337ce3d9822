// fy-async-optimizer: a layer group's AdamW updates become the background
// pipeline grad_offload → state_read → group_adamw → state_write as soon as
// backward has produced the group's gradients, and the next step waits for
// it just before reading the group's parameters.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

namespace fuyou {
#define GEN_PASS_DEF_ASYNCOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

struct AsyncOptimizer : fuyou::impl::AsyncOptimizerBase<AsyncOptimizer> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return;
    for (auto group : module.getOps<fs::GroupOp>())
      if (!group.getOnDevice() && failed(rewriteGroup(step, group)))  // fy-device-optimizer's stay inline
        return signalPassFailure();
  }

  LogicalResult rewriteGroup(func::FuncOp step, fs::GroupOp group) {
    llvm::StringMap<fs::CpuAdamWOp> updates;
    fs::CpuAdamWOp last;
    step.walk([&](fs::CpuAdamWOp op) {
      if (op.getGroup() && *op.getGroup() == group.getSymName()) {
        updates[op.getParam()] = op;
        last = op;
      }
    });
    if (updates.size() != group.getParams().size())
      return group.emitOpError("has ") << group.getParams().size() << " parameters but "
                                       << updates.size() << " updates in @train_step";
    for (Attribute a : group.getParams())
      if (!updates.count(cast<FlatSymbolRefAttr>(a).getValue()))
        return group.emitOpError("parameter ") << a << " has no update of the group in @train_step";
    SmallVector<Value> grads;
    for (Attribute a : group.getParams())
      grads.push_back(updates.lookup(cast<FlatSymbolRefAttr>(a).getValue()).getGrad());
    OpBuilder b(last);
    auto ref = FlatSymbolRefAttr::get(group.getSymNameAttr());
    Location loc = last.getLoc();
    Type token = fs::TokenType::get(b.getContext());
    Value out = b.create<fs::GradOffloadOp>(loc, token, ref, grads);
    // The read goes right before its use; fy-prefetch-state hoists it.
    Value in = b.create<fs::StateReadOp>(loc, token, ref);
    Value update = b.create<fs::GroupAdamWOp>(loc, token, ref, ValueRange{out, in});
    b.create<fs::StateWriteOp>(loc, ref, update);
    for (auto &kv : updates)
      kv.getValue().erase();

    // Before the first read of any of the group's parameters.
    llvm::StringSet<> members;
    for (Attribute a : group.getParams())
      members.insert(cast<FlatSymbolRefAttr>(a).getValue());
    Operation *first = nullptr;
    for (Operation &op : step.getBody().front())
      if (auto gp = dyn_cast<fs::GetParamOp>(op); gp && members.contains(gp.getName())) {
        first = &op;
        break;
      }
    b.setInsertionPoint(first ? first : &step.getBody().front().front());
    b.create<fs::GroupWaitOp>(group.getLoc(), ref, FlatSymbolRefAttr());
    return success();
  }
};

} // namespace
