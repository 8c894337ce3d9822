// fy-insert-adamw: one fygraph.adamw per trainable parameter, as early as its
// gradient is complete and its last read is done, so that later passes start
// from an order where each update may overlap the rest of backward.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace fuyou {
#define GEN_PASS_DEF_INSERTADAMW
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;

namespace {

struct InsertAdamW : fuyou::impl::InsertAdamWBase<InsertAdamW> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    auto names = func ? func->getAttrOfType<ArrayAttr>("fygraph.grads") : nullptr;
    if (!names) {
      module.emitError("fy-insert-adamw needs @train_step from fy-autodiff");
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    DenseMap<Operation *, unsigned> position;
    for (auto [i, op] : llvm::enumerate(body))
      position[&op] = i;

    for (auto [i, attr] : llvm::enumerate(names)) {
      auto sym = cast<FlatSymbolRefAttr>(attr);
      Value grad = ret.getOperand(i + 1);
      // After the gradient exists and after every read of the parameter.
      Operation *after = grad.getDefiningOp();
      auto later = [&](Operation *op) {
        if (!after || position[op] > position[after])
          after = op;
      };
      body.walk([&](fg::GetParamOp gp) {
        if (gp.getName() != sym.getValue())
          return;
        for (Operation *user : gp->getUsers())
          later(user);
      });
      OpBuilder b(&getContext());
      if (after && after != ret)
        b.setInsertionPointAfter(after);
      else
        b.setInsertionPoint(ret);
      b.create<fg::AdamWOp>(ret.getLoc(), sym, grad);
    }
    OpBuilder b(ret);
    b.create<func::ReturnOp>(ret.getLoc(), ret.getOperand(0));
    ret.erase();
    func.setFunctionType(b.getFunctionType(func.getArgumentTypes(), {func.getResultTypes()[0]}));
    func->removeAttr("fygraph.grads");
  }
};

} // namespace
