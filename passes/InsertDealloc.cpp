// fy-insert-dealloc: each buffer dies right after its last use, reads through
// views included, so the memory plan sees true lifetimes.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace fuyou {
#define GEN_PASS_DEF_INSERTDEALLOC
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

struct InsertDealloc : fuyou::impl::InsertDeallocBase<InsertDealloc> {
  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp f) {
      for (Block &block : f.getBody())
        processBlock(block);
    });
  }

  void processBlock(Block &block) {
    DenseMap<Operation *, unsigned> position;
    for (auto [i, op] : llvm::enumerate(block))
      position[&op] = i;
    SmallVector<Operation *> owners;
    for (Operation &op : block)
      if (isa<fs::AllocOp, fs::ConstantOp>(op))
        owners.push_back(&op);
    for (Operation *owner : owners) {
      // Last user over the buffer and every view of it.
      Operation *last = owner;
      bool escapes = false;
      SmallVector<Value> work{owner->getResult(0)};
      while (!work.empty()) {
        Value v = work.pop_back_val();
        for (Operation *user : v.getUsers()) {
          Operation *top = block.findAncestorOpInBlock(*user);
          if (!top || isa<func::ReturnOp>(top)) {
            escapes = true;
            continue;
          }
          if (auto view = dyn_cast<fs::ViewOp>(top))
            work.push_back(view.getResult());
          if (position[top] > position[last])
            last = top;
        }
      }
      if (escapes)
        continue;
      OpBuilder b(owner->getContext());
      b.setInsertionPointAfter(last);
      b.create<fs::DeallocOp>(owner->getLoc(), owner->getResult(0));
    }
  }
};

} // namespace
