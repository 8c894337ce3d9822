#include "passes/Analysis/StepPhases.h"

#include "dialects/FySched/FySchedOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <functional>

using namespace mlir;
namespace fs = fuyou::fysched;

namespace fuyou {

Value rootBuffer(Value v) {
  while (auto view = v.getDefiningOp<fs::ViewOp>())
    v = view.getSource();
  return v;
}

StepPhases::StepPhases(Block &body) {
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  Value loss = ret && ret.getNumOperands() ? rootBuffer(ret.getOperand(0)) : Value();
  for (auto [i, op] : llvm::enumerate(body)) {
    pos_[&op] = int64_t(i);
    if (auto launch = dyn_cast<fs::LaunchOp>(op); launch && loss && !hasBackward())
      for (Value out : launch.getOuts())
        if (rootBuffer(out) == loss)
          boundary_ = int64_t(i);
  }
}

void StepPhases::rebaseBackward(Value from, Value to, OpBuilder &b) const {
  // Whether backward reads a value, directly or through views.
  std::function<bool(Value)> readLater = [&](Value v) {
    for (Operation *user : v.getUsers()) {
      if (backward(user))
        return true;
      if (auto view = dyn_cast<fs::ViewOp>(user); view && contains(view) && readLater(view.getResult()))
        return true;
    }
    return false;
  };
  for (OpOperand &use : llvm::make_early_inc_range(from.getUses())) {
    Operation *user = use.getOwner();
    if (backward(user)) {
      use.set(to);
    } else if (auto view = dyn_cast<fs::ViewOp>(user); view && readLater(view.getResult())) {
      auto again = b.create<fs::ViewOp>(view.getLoc(), view.getType(), to);
      rebaseBackward(view.getResult(), again.getResult(), b);
    }
  }
}

} // namespace fuyou
