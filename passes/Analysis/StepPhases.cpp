#include "passes/Analysis/StepPhases.h"

#include "dialects/FySched/FySchedOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

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

} // namespace fuyou
