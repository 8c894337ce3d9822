// fy-param-waits: the next forward waits for each parameter's update, not
// for its whole group's. The gradients backward makes last are those the
// next forward reads first, so at the end of backward a group's whole update
// stood between the two; now the forward starts once the group's first
// parameter is updated, and the update of the rest runs beside it.
#include "passes/Passes.h"
#include "passes/AttrNames.h"

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
  // A group_wait without a parameter and each member's first read after it
  // (up to the group's next wait), in the order they come.
  struct Split {
    fs::GroupWaitOp wait;
    SmallVector<std::pair<FlatSymbolRefAttr, Operation *>> firstReads;
    llvm::StringSet<> seen;
  };

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || !fuyou::attr::scheduleRule(module, fuyou::attr::kScheduleParamWaits))
      return;
    Block &body = step.getBody().front();
    llvm::StringMap<fs::GroupOp> groups, groupOfParam;
    for (auto group : module.getOps<fs::GroupOp>()) {
      groups[group.getSymName()] = group;
      for (Attribute a : group.getParams())
        groupOfParam[cast<FlatSymbolRefAttr>(a).getValue()] = group;
    }
    // One walk: what names each parameter's storage (its get_param results,
    // views of them) and, per wait, the first reads that follow it.
    DenseMap<Value, FlatSymbolRefAttr> paramOf;
    std::vector<Split> splits;
    llvm::StringMap<int64_t> open;  // group -> its wait collecting reads (-1: none)
    for (Operation &op : body) {
      if (auto gp = dyn_cast<fs::GetParamOp>(op)) {
        paramOf[gp.getResult()] = gp.getNameAttr();
        continue;
      }
      if (auto view = dyn_cast<fs::ViewOp>(op)) {
        if (auto it = paramOf.find(view->getOperand(0)); it != paramOf.end())
          paramOf[view.getResult()] = it->second;
        continue;
      }
      if (auto wait = dyn_cast<fs::GroupWaitOp>(op)) {
        // Reads from here on are this wait's (a wait naming a parameter
        // collects none).
        open[wait.getGroup()] = wait.getParam() ? -1 : int64_t(splits.size());
        if (!wait.getParam())
          splits.push_back(Split{wait, {}, {}});
        continue;
      }
      for (Value v : op.getOperands()) {
        auto it = paramOf.find(v);
        if (it == paramOf.end())
          continue;
        auto group = groupOfParam.find(it->second.getValue());
        if (group == groupOfParam.end())
          continue;
        auto at = open.find(group->second.getSymName());
        if (at == open.end() || at->second < 0)
          continue;
        Split &s = splits[at->second];
        if (s.seen.insert(it->second.getValue()).second)
          s.firstReads.push_back({it->second, &op});
      }
    }
    llvm::StringMap<std::pair<SmallVector<Attribute>, llvm::StringMap<unsigned>>> reorders;
    for (Split &s : splits) {
      for (auto [param, op] : s.firstReads)
        OpBuilder(op).create<fs::GroupWaitOp>(s.wait.getLoc(), s.wait.getGroupAttr(), param);
      StringRef name = s.wait.getGroup();
      fs::GroupOp group = groups.lookup(name);
      s.wait.erase();
      // The update goes in the order of the reads: the group's first wait decides.
      if (!group || reorders.contains(name))
        continue;
      SmallVector<Attribute> order;
      for (auto &read : s.firstReads)
        order.push_back(read.first);
      for (Attribute a : group.getParams())
        if (!s.seen.contains(cast<FlatSymbolRefAttr>(a).getValue()))
          order.push_back(a);
      auto &[newOrder, was] = reorders[name];
      if (ArrayRef<Attribute>(order) == group.getParams().getValue())
        continue;
      for (auto [i, a] : llvm::enumerate(group.getParams()))
        was[cast<FlatSymbolRefAttr>(a).getValue()] = i;
      newOrder = order;
      group.setParamsAttr(ArrayAttr::get(group.getContext(), order));
    }
    // One gradient per parameter, in the group's order.
    module.walk([&](fs::GradOffloadOp off) {
      auto it = reorders.find(off.getGroup());
      if (it == reorders.end() || it->second.first.empty())
        return;
      auto &[order, was] = it->second;
      SmallVector<Value> grads;
      for (Attribute a : order)
        grads.push_back(off.getGrads()[was.lookup(cast<FlatSymbolRefAttr>(a).getValue())]);
      off.getGradsMutable().assign(grads);
    });
  }
};

} // namespace
