#include "passes/Analysis/BufferLiveness.h"

#include "dialects/FySched/FySchedOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
namespace fs = fuyou::fysched;

namespace fuyou {

BufferLiveness::BufferLiveness(Block &block) {
  for (auto [i, op] : llvm::enumerate(block))
    position_[&op] = i;
  // Where each grad_offload's copy is known to have landed: its
  // grad_landed (fy-grad-landed), else the block's last op before its
  // terminator (where the runtime waits for the step's copies).
  llvm::DenseMap<Operation *, Operation *> landed;
  // A grad_offload_early's chunks go down up to its own group's grad_offload.
  Operation *last = block.mightHaveTerminator() && block.back().getPrevNode() ? block.back().getPrevNode() : &block.back();
  SmallVector<fs::GradOffloadEarlyOp> early;
  for (Operation &op : block) {
    if (auto l = dyn_cast<fs::GradLandedOp>(op))
      landed[l.getToken().getDefiningOp()] = &op;
    if (auto off = dyn_cast<fs::GradOffloadOp>(op)) {
      landed.try_emplace(&op, last);
      for (fs::GradOffloadEarlyOp &e : early)
        if (e && e.getGroup() == off.getGroup()) {
          landed[e] = &op;
          e = nullptr;
        }
    }
    if (auto e = dyn_cast<fs::GradOffloadEarlyOp>(op))
      early.push_back(e);
  }
  for (fs::GradOffloadEarlyOp e : early)
    if (e)
      landed[e] = last;
  for (Operation &op : block) {
    if (!isa<fs::AllocOp, fs::ConstantOp>(op))
      continue;
    auto t = cast<fs::BufferType>(op.getResult(0).getType());
    BufferInterval iv{&op, &op, position_[&op], position_[&op], t.getSizeInBytes(), false};
    SmallVector<Value> work{op.getResult(0)};
    while (!work.empty()) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers()) {
        Operation *top = block.findAncestorOpInBlock(*user);
        if (!top || isa<func::ReturnOp>(top)) {
          iv.escapes = true;
          continue;
        }
        if (auto view = dyn_cast<fs::ViewOp>(top))
          work.push_back(view.getResult());
        if (isa<fs::DeallocOp>(top))
          continue;  // the end of a lifetime is not a use
        if (isa<fs::GradOffloadOp, fs::GradOffloadEarlyOp>(top))
          top = landed.lookup(top);
        // An asynchronous copy uses both buffers until the wait for it.
        if (auto copy = dyn_cast<fs::CopyOp>(top); copy && copy.getToken())
          top = *copy.getToken().getUsers().begin();
        if (position_[top] > iv.end) {
          iv.end = position_[top];
          iv.last = top;
        }
      }
    }
    intervals_.push_back(iv);
  }
}

} // namespace fuyou
