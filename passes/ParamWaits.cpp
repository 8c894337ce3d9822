// fy-param-waits: the next forward waits for each parameter's update, not
// for its whole group's. The gradients backward makes last are those the
// next forward reads first, so at the end of backward a group's whole update
// stood between the two; now the forward starts once the group's first
// parameter is updated, and the update of the rest runs beside it.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

namespace fuyou {
#define GEN_PASS_DEF_PARAMWAITS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

struct ParamWaits : fuyou::impl::ParamWaitsBase<ParamWaits> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return;
    Block &body = step.getBody().front();
    SmallVector<fs::GroupWaitOp> waits;
    for (auto wait : body.getOps<fs::GroupWaitOp>())
      if (!wait.getParam())
        waits.push_back(wait);
    llvm::StringSet<> reordered;
    for (fs::GroupWaitOp wait : waits)
      if (auto group = module.lookupSymbol<fs::GroupOp>(wait.getGroupAttr()))
        split(module, body, wait, group, reordered);
  }

  void split(ModuleOp module, Block &body, fs::GroupWaitOp wait, fs::GroupOp group, llvm::StringSet<> &reordered) {
    llvm::StringSet<> members;
    for (Attribute a : group.getParams())
      members.insert(cast<FlatSymbolRefAttr>(a).getValue());
    // What names each member's storage: its get_param results (a table read
    // rows first has its get_param above the wait) and views of them.
    DenseMap<Value, FlatSymbolRefAttr> paramOf;
    for (Operation &op : body) {
      if (auto gp = dyn_cast<fs::GetParamOp>(op); gp && members.contains(gp.getName()))
        paramOf[gp.getResult()] = gp.getNameAttr();
      else if (auto view = dyn_cast<fs::ViewOp>(op))
        if (auto it = paramOf.find(view->getOperand(0)); it != paramOf.end())
          paramOf[view.getResult()] = it->second;
    }
    // Each member's first read after the wait, in the order they come.
    SmallVector<std::pair<FlatSymbolRefAttr, Operation *>> firstReads;
    llvm::StringSet<> seen;
    for (Operation *op = wait->getNextNode(); op; op = op->getNextNode()) {
      if (auto other = dyn_cast<fs::GroupWaitOp>(op); other && other.getGroup() == group.getSymName())
        break;  // reads from here on are that wait's
      if (isa<fs::GetParamOp, fs::ViewOp>(op))
        continue;
      for (Value v : op->getOperands())
        if (auto it = paramOf.find(v); it != paramOf.end() && seen.insert(it->second.getValue()).second)
          firstReads.push_back({it->second, op});
    }
    for (auto [param, op] : firstReads)
      OpBuilder(op).create<fs::GroupWaitOp>(wait.getLoc(), wait.getGroupAttr(), param);
    wait.erase();

    // The update goes in the order of the reads: the group's first wait decides.
    if (!reordered.insert(group.getSymName()).second)
      return;
    SmallVector<Attribute> order;
    for (auto &read : firstReads)
      order.push_back(read.first);
    for (Attribute a : group.getParams())
      if (!seen.contains(cast<FlatSymbolRefAttr>(a).getValue()))
        order.push_back(a);
    if (ArrayRef<Attribute>(order) == group.getParams().getValue())
      return;
    llvm::StringMap<unsigned> was;
    for (auto [i, a] : llvm::enumerate(group.getParams()))
      was[cast<FlatSymbolRefAttr>(a).getValue()] = i;
    group.setParamsAttr(ArrayAttr::get(group.getContext(), order));
    // One gradient per parameter, in the group's order.
    module.walk([&](fs::GradOffloadOp off) {
      if (off.getGroup() != group.getSymName())
        return;
      SmallVector<Value> grads;
      for (Attribute a : order)
        grads.push_back(off.getGrads()[was.lookup(cast<FlatSymbolRefAttr>(a).getValue())]);
      off.getGradsMutable().assign(grads);
    });
  }
};

} // namespace
