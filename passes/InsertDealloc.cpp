// fy-insert-dealloc: each buffer dies right after its last use, reads through
// views included, so the memory plan sees true lifetimes.
#include "passes/Analysis/BufferLiveness.h"
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
    fuyou::BufferLiveness liveness(block);
    for (const fuyou::BufferInterval &iv : liveness.intervals()) {
      if (iv.escapes)
        continue;
      OpBuilder b(iv.def->getContext());
      b.setInsertionPointAfter(iv.last);
      b.create<fs::DeallocOp>(iv.def->getLoc(), iv.def->getResult(0));
    }
  }
};

} // namespace
