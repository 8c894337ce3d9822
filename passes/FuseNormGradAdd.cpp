// fy-fuse-norm-grad-add: a norm's input gradient summed into the residual
// stream's gradient by the norm's gradient kernel (Passes.td says why the
// bits are the add's).
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"

namespace fuyou {
#define GEN_PASS_DEF_FUSENORMGRADADD
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;

namespace {

// Where the fused op can stand: at the norm's gradient when the addend is
// made before it, else at the add when nothing reads the gradient's other
// results (the scale's and bias's) before the add. Null: nowhere.
Operation *placeFor(Operation *grad, fg::AddOp add, Value addend) {
  Operation *def = addend.getDefiningOp();
  Block *block = grad->getBlock();
  if (add->getBlock() != block)
    return nullptr;
  if (!def ? cast<BlockArgument>(addend).getOwner() == block
           : def->getBlock() == block && def->isBeforeInBlock(grad))
    return grad;
  if (!def || def->getBlock() != block)
    return nullptr;
  for (Value r : grad->getResults().drop_front())
    for (Operation *user : r.getUsers())
      if (user->getBlock() == block && !add->isBeforeInBlock(user))
        return nullptr;
  return add;
}

// add(norm_grad(...).dinput, g) (either order), of one type, dinput read by
// the add alone -> norm_grad(..., addend = g).
template <class GradOp> bool fuse(fg::AddOp add, PatternRewriter &rw) {
  for (auto [d, g] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
    auto grad = d.template getDefiningOp<GradOp>();
    if (!grad || grad.getAddend() || !d.hasOneUse() || d != grad.getDinput() || d.getType() != add.getType() ||
        g.getType() != add.getType())
      continue;
    Operation *at = placeFor(grad, add, g);
    if (!at)
      continue;
    rw.setInsertionPoint(at);
    SmallVector<Value> operands(grad->getOperands());
    operands.push_back(g);
    Operation *fused = rw.create<GradOp>(grad.getLoc(), grad->getResultTypes(), operands, grad->getAttrs());
    rw.replaceOp(add, fused->getResult(0));
    rw.replaceOp(grad, fused->getResults());
    return true;
  }
  return false;
}

// One walk, as fy-fuse-bias: the greedy driver would also fold and hoist.
struct FuseNormGradAdd : fuyou::impl::FuseNormGradAddBase<FuseNormGradAdd> {
  void runOnOperation() override {
    SmallVector<fg::AddOp> adds;
    getOperation().walk([&](fg::AddOp add) { adds.push_back(add); });
    PatternRewriter rw(&getContext());
    for (fg::AddOp add : adds)
      if (!fuse<fg::LayerNormGradOp>(add, rw))
        fuse<fg::RMSNormGradOp>(add, rw);
  }
};

} // namespace
